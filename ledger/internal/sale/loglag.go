package sale

import "time"

// LogLag is the admissions consumer group's lag as the settler trusts it
// (UseLogLag): on is false on a ledger without an admissions log, known
// false until it was measured.
func (l *Ledger) LogLag() (lag time.Duration, known, on bool) {
	if l.settler == nil || l.settler.logLag == nil {
		return 0, false, false
	}
	lag, known = l.settler.logLag()
	return lag, known, true
}
