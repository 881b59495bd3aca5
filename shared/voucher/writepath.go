package voucher

// A voucher's write path (voucher.write_path): how a use the Redis gate
// admitted becomes a row. The article's Approach A and Approach B.
const (
	// WritePathSync writes the admitted reservation in the ledger's group
	// commit before the request is answered (Approach A).
	WritePathSync = "sync"
	// WritePathLog produces the admission to Kafka and answers once the
	// broker acknowledged it; the ledger's consumer writes the row (Approach
	// B). Flash vouchers only: a standard voucher has no gate to admit it.
	WritePathLog = "log"
)

// ValidWritePath reports whether p names a write path.
func ValidWritePath(p string) bool { return p == WritePathSync || p == WritePathLog }

// ErrLogNeedsFlash refuses writePath log on a standard voucher.
var ErrLogNeedsFlash = invalid("writePath log needs a flash-sale voucher (flashSale true)")

// ErrWritePathLive refuses a change of writePath on a live voucher: its
// admissions in flight would be written by both paths at once. Pause it first.
var ErrWritePathLive = &Error{Code: CodeWritePathLive,
	Message: "writePath cannot change while the voucher is live: pause it (or wait until it ended) first"}

// ParseWritePath reads writePath as a create or a PATCH writes it: nil keeps
// def.
func ParseWritePath(p *string, def string) (string, error) {
	if p == nil {
		return def, nil
	}
	if !ValidWritePath(*p) {
		return "", invalid("writePath must be %q or %q", WritePathSync, WritePathLog)
	}
	return *p, nil
}
