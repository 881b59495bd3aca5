package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

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
