package verify

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	held := []Check{{Name: "no oversell", Pass: true}, {Name: "every 201 has its DB row", Pass: true}}
	broken := []Check{{Name: "no oversell", Pass: false}, {Name: "every 201 has its DB row", Pass: true}}
	tests := []struct {
		name     string
		s        Summary
		wantPass bool
		want     []string // in the reasons, in order
	}{
		{"no 503", Summary{Answered: 20000, Checks: held, Pass: true}, true, nil},
		{"1% of 503 passes", Summary{Answered: 20000, Unavailable: 200, Errors: 200, ErrorRate: 0.01, Checks: held, Pass: true}, true, nil},
		{"just over 1% of 503 fails", Summary{Answered: 20000, Unavailable: 201, Errors: 201, ErrorRate: 0.01005, Checks: held, Pass: true},
			false, []string{"201 of 20000 answers (1.00%) were 503 shed/unavailable"}},
		{"7% of 503 fails", Summary{Answered: 20000, Unavailable: 1400, Errors: 1400, ErrorRate: 0.07, Checks: held, Pass: true},
			false, []string{"1400 of 20000 answers (7.00%) were 503"}},
		{"other failures over 1% fail", Summary{Answered: 1000, Unavailable: 2, Errors: 30, ErrorRate: 0.03,
			ErrorSamples: []string{"transport error"}, Checks: held, Pass: true},
			false, []string{"30 of 1000 requests (3.00%) failed (transport error)"}},
		{"an invariant fails", Summary{Answered: 20000, Checks: broken, Pass: false},
			false, []string{"1 invariant(s) failed: no oversell"}},
		{"both", Summary{Answered: 100, Unavailable: 50, Errors: 50, ErrorRate: 0.5, Checks: broken, Pass: false},
			false, []string{"50 of 100 answers (50.00%) were 503", "1 invariant(s) failed: no oversell"}},
		{"unchecked, no 503", Summary{Answered: 100}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := Judge(&tt.s)
			if j.Pass != tt.wantPass || len(j.Reasons) != len(tt.want) {
				t.Fatalf("Judge(%+v) = %+v, want pass %v with %d reason(s)", tt.s, j, tt.wantPass, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(j.Reasons[i], w) {
					t.Errorf("Judge reason %d = %q, want it to contain %q", i, j.Reasons[i], w)
				}
			}
			line := j.Line(&tt.s)
			if wantPrefix := Verdict(tt.wantPass) + ": "; !strings.HasPrefix(line, wantPrefix) {
				t.Errorf("Line() = %q, want it to begin %q", line, wantPrefix)
			}
		})
	}
}
