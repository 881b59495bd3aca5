package api

// ErrorBody is the body of every error answer: a code from the voucher
// package's list, a message safe to show, and a reason with NOT_ELIGIBLE.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}
