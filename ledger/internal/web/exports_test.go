package web

// What the external tests (package web_test) reach inside the handlers for.
var (
	EncodeCursor = encodeCursor
	CSVHeader    = csvHeader
)
