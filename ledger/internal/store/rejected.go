package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ReasonRejected is the dead-letter reason of a logged admission the
// database refused with an error no answer maps (see Rejected).
const ReasonRejected = "REJECTED"

// ErrRejected marks such a refusal (errors.Is), whatever domain code it is
// answered with.
var ErrRejected = errors.New("rejected by the database")

// Rejected reports whether err is the database refusing the data itself (an
// integrity constraint, SQLSTATE class 23, or a data exception, class 22)
// with no answer mapped to it (Translate maps the guards it knows), and
// describes it for an operator. Sent again, such a statement fails again; a
// fault (a lost connection, a timeout) is not one.
func Rejected(err error) (what string, ok bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !(strings.HasPrefix(pe.Code, "23") || strings.HasPrefix(pe.Code, "22")) {
		return "", false
	}
	what = fmt.Sprintf("%s (SQLSTATE %s", pe.Message, pe.Code)
	if pe.ConstraintName != "" {
		what += ", constraint " + pe.ConstraintName
	}
	return what + ")", true
}
