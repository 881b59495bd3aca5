package sale

// LogWait is logWait, for the external tests (package sale_test).
const LogWait = logWait

// SetAfterRead sets the settler's hook between its read and its Redis step.
func (s *Settler) SetAfterRead(f func()) { s.afterRead = f }
