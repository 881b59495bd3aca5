package verify

import (
	"fmt"
	"strings"
)

// MaxUnavailable is the share of a burst's answers that may be 503 (shed or
// unavailable) or otherwise failed for the burst to pass: the suite's own bar
// (the burst package's tests fail above it). A demo that sheds 7% of a sale
// and prints PASS tells the reader nothing went wrong; one that fails says
// the machine or the stack could not take the burst.
const MaxUnavailable = 0.01

// Judgement is the verdict on a whole burst: its invariants and its answers.
type Judgement struct {
	Pass    bool     `json:"pass"`
	Reasons []string `json:"reasons,omitempty"` // why it failed, one sentence each
}

// Judge passes s when every invariant held (when it was checked) and at most
// MaxUnavailable of its answers were 503, and at most MaxUnavailable failed
// in all (no answer, or not 2xx/409/422).
func Judge(s *Summary) Judgement {
	var reasons []string
	answered := max(s.Answered, 1)
	if share := float64(s.Unavailable) / float64(answered); share > MaxUnavailable {
		reasons = append(reasons, fmt.Sprintf("%d of %d answers (%.2f%%) were 503 shed/unavailable, above the %g%% a burst may be refused",
			s.Unavailable, s.Answered, 100*share, 100*MaxUnavailable))
	} else if s.ErrorRate > MaxUnavailable {
		reasons = append(reasons, fmt.Sprintf("%d of %d requests (%.2f%%) failed (%s), above the %g%% a burst may lose",
			s.Errors, s.Answered, 100*s.ErrorRate, strings.Join(s.ErrorSamples, "; "), 100*MaxUnavailable))
	}
	if len(s.Checks) > 0 && !s.Pass {
		var names []string
		for _, c := range s.Checks {
			if !c.Pass {
				names = append(names, c.Name)
			}
		}
		reasons = append(reasons, fmt.Sprintf("%d invariant(s) failed: %s", len(names), strings.Join(names, "; ")))
	}
	return Judgement{Pass: len(reasons) == 0, Reasons: reasons}
}

// Line is the judgement as one line of the console: "PASS: ..." or "FAIL: ...".
func (v Judgement) Line(s *Summary) string {
	if !v.Pass {
		return "FAIL: " + strings.Join(v.Reasons, "; ")
	}
	checked := "invariants not checked (no database)"
	if len(s.Checks) > 0 {
		checked = fmt.Sprintf("all %d invariants held", len(s.Checks))
	}
	return fmt.Sprintf("PASS: %s; %d of %d answers 503 (%.2f%%, at most %g%% allowed)",
		checked, s.Unavailable, s.Answered, 100*float64(s.Unavailable)/float64(max(s.Answered, 1)), 100*MaxUnavailable)
}
