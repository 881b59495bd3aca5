package chaos

import (
	"cmp"
	"net/http"
	"slices"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// Result is one scenario's figures and verdicts.
type Result struct {
	Scenario     string  `json:"scenario"`
	Fault        string  `json:"fault"`
	Code         string  `json:"voucher"`
	ProbeCode    string  `json:"probeVoucher"`
	Stock        int     `json:"stock"`
	FaultAt      float64 `json:"faultAtSeconds"` // into the burst
	FaultSeconds float64 `json:"faultSeconds"`   // from injection until the dependency was back
	Rate         float64 `json:"requestedRate"`  // of the burst
	Achieved     float64 `json:"achievedRate"`   // of the burst

	// Every request, of the burst and the probes, and so every one checked.
	Requests       int `json:"requests"`
	Probes         int `json:"probes"`
	RetryingOrders int `json:"retryingOrders"` // orders of the clients that retry their 503s
	RetryingSends  int `json:"retryingSends"`  // and their requests, first sends included
	Created        int `json:"answers201"`
	Refused        int `json:"answers409"` // 409 and 422
	Unavailable    int `json:"answers503"`
	Errors         int `json:"errors"` // no answer (transport error, timeout) or another status
	// Replays: requests the clients' transport sent again on a new connection
	// because the server had closed an idle one under them (idempotencyKey).
	Replays      int64          `json:"replays"`
	Statuses     map[string]int `json:"statuses"`
	ErrorSamples []string       `json:"errorSamples,omitempty"`

	// Answers to requests sent while the fault lasted.
	DuringFault       int     `json:"duringFault"`
	DuringFault201    int     `json:"duringFault201"`
	DuringFault503    int     `json:"duringFault503"`
	DuringFault503P99 float64 `json:"duringFault503P99Ms"`
	DuringFault503Max float64 `json:"duringFault503MaxMs"`
	// BeforeFaultP99: p99 of the answers to the requests sent before the
	// fault, in ms: what the machine's load alone costs an answer in this
	// run, which the fast-503 bound adds to its own.
	BeforeFaultP99 float64 `json:"beforeFaultP99Ms"`
	// DuringFaultLivenessP99: p99 of the proxy's /healthz answers while the
	// fault lasted, in ms (liveness): what the machine's load cost an answer
	// then, the fault's own cost left out; 0 in the overload scenario.
	DuringFaultLivenessP99 float64 `json:"duringFaultLivenessP99Ms"`

	// RecoverySeconds: after the fault ended, until the first of
	// probesInARow answered probes in a row came back; -1 when it never did.
	RecoverySeconds float64 `json:"recoverySeconds"`
	RecoveryBound   float64 `json:"recoveryBoundSeconds"`
	// SettleSeconds: after the last request, until Redis agreed exactly with
	// the database on both vouchers; -1 when it never did.
	SettleSeconds float64 `json:"settleSeconds"`
	SettleBound   float64 `json:"settleBoundSeconds"`
	SettleDetail  string  `json:"settleDetail,omitempty"`

	// Latency of every answer (overload); Rounds and Samples: the soak's.
	Latency *load.Latency `json:"latency,omitempty"`
	Rounds  []*Result     `json:"rounds,omitempty"`
	Samples []ProcSample  `json:"samples,omitempty"`

	DB             *verify.DBSummary `json:"db,omitempty"`
	RedisRemaining *int64            `json:"redisRemaining,omitempty"`
	Checks         []verify.Check    `json:"checks"`
	Pass           bool              `json:"pass"`
	Error          string            `json:"error,omitempty"` // the harness could not run the scenario
}

// tally counts the answers of the burst and the probes.
func (res *Result) tally(burst, probes []load.Shot, faultStart, faultEnd time.Time) {
	seen := map[string]bool{}
	var slow, before []time.Duration
	for _, s := range slices.Concat(burst, probes) {
		res.Requests++
		res.Statuses[load.StatusKey(s)]++
		switch {
		case s.Status == http.StatusCreated:
			res.Created++
		case s.Status == http.StatusConflict || s.Status == http.StatusUnprocessableEntity:
			res.Refused++
		case s.Status == http.StatusServiceUnavailable || s.Status == http.StatusTooManyRequests:
			// A 429 (an order sent again before its Retry-After) decided
			// nothing either: a refusal to serve now, not a wrong answer.
			res.Unavailable++
		case s.Failed():
			res.Errors++
			msg := cmp.Or(s.Err, load.StatusKey(s))
			if !seen[msg] && len(res.ErrorSamples) < 5 {
				seen[msg] = true
				res.ErrorSamples = append(res.ErrorSamples, msg)
			}
		}
		if s.At.Before(faultStart) {
			if !s.Failed() {
				before = append(before, s.Latency)
			}
			continue
		}
		if s.At.After(faultEnd) {
			continue
		}
		res.DuringFault++
		switch s.Status {
		case http.StatusCreated:
			res.DuringFault201++
		case http.StatusServiceUnavailable:
			res.DuringFault503++
			slow = append(slow, s.Latency)
		}
	}
	l := load.LatencyOf(slow)
	res.DuringFault503P99, res.DuringFault503Max = l.P99, l.Max
	res.BeforeFaultP99 = load.LatencyOf(before).P99
}

func countSent(shots []load.Shot, from, to time.Time) int {
	n := 0
	for _, s := range shots {
		if !s.At.Before(from) && !s.At.After(to) {
			n++
		}
	}
	return n
}
