package sale

// LogWait is logWait, for the external tests (package sale_test).
const LogWait = logWait
