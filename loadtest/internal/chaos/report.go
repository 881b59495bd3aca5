package chaos

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// Report is chaos.json.
type Report struct {
	Started  time.Time      `json:"started"`
	Seconds  float64        `json:"seconds"`
	Command  string         `json:"command"`
	CPUs     int            `json:"cpus"`
	LoadAvg  float64        `json:"loadAvg1AtStart"`
	Config   map[string]any `json:"config"`
	Results  []*Result      `json:"results"`
	Pass     bool           `json:"pass"`
	Verdicts string         `json:"verdicts"` // "10 of 10 scenarios passed"
}

func newReport(cfg Config, command string) *Report {
	return &Report{
		Started: time.Now(), Command: command, CPUs: runtime.NumCPU(), LoadAvg: load.LoadAvg(),
		Config: map[string]any{
			"rate": cfg.Rate, "durationSeconds": cfg.Duration.Seconds(), "requestsPerScenario": cfg.requests(),
			"faultAtSeconds": cfg.FaultAt.Seconds(), "faultForSeconds": cfg.FaultFor.Seconds(),
			"stock": cfg.Stock, "recoveryBoundSeconds": cfg.RecoveryBound.Seconds(),
			"settleBoundSeconds": cfg.SettleBound.Seconds(), "fast503Seconds": cfg.Fast503.Seconds(),
			"clientTimeoutSeconds": cfg.Attack.Timeout.Seconds(),
			"ledgerEnv":            chaosLedgerEnv, "reconcilerEnv": reconcilerEnv, "proxyEnv": chaosProxyEnv, "seed": cfg.Seed,
		},
	}
}

func (rep *Report) finish() {
	rep.Seconds = time.Since(rep.Started).Seconds()
	passed := 0
	for _, r := range rep.Results {
		if r.Pass {
			passed++
		}
	}
	rep.Pass = passed == len(rep.Results)
	rep.Verdicts = fmt.Sprintf("%d of %d scenarios passed", passed, len(rep.Results))
}

// PrintChaosTable writes one line per scenario.
func PrintChaosTable(w io.Writer, results []*Result) {
	fmt.Fprintf(w, "%-17s %6s %8s %6s %6s %6s %6s %8s %-10s %9s %8s %s\n",
		"scenario", "fault", "requests", "201", "409", "503", "errors", "503 p99", "invariants", "recovered", "Redis=DB", "verdict")
	for _, r := range results {
		fmt.Fprintf(w, "%-17s %5.1fs %8d %6d %6d %6d %6d %8s %-10s %9s %8s %s\n",
			r.Scenario, r.FaultSeconds, r.Requests, r.Created, r.Refused, r.Unavailable, r.Errors,
			p99Of503(r), invariantsVerdict(r), seconds(r.RecoverySeconds), seconds(r.SettleSeconds), verify.Verdict(r.Pass))
	}
}

// behaviourChecks are the checks on how the system behaved (speed, recovery,
// answers through a deploy or an overload), not invariants.
var behaviourChecks = map[string]bool{
	checkFast503: true, checkRecovered: true, checkSettled: true, checkAnswered: true,
	checkAllP99: true, checkNoTimeouts: true, checkFlat: true,
}

// invariantsVerdict is PASS or FAIL over the checks that are invariants
// (all but behaviourChecks), or ERROR when the
// scenario did not run.
func invariantsVerdict(r *Result) string {
	if r.Error != "" {
		return "ERROR"
	}
	for _, c := range r.Checks {
		if !c.Pass && !behaviourChecks[c.Name] {
			return "FAIL"
		}
	}
	return "PASS"
}

func seconds(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2fs", s)
}

// p99Of503 is the p99 of the 503s sent while the fault lasted, or "-".
func p99Of503(r *Result) string {
	if r.DuringFault503 == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", r.DuringFault503P99)
}

// reportChaos prints the table of the results and writes chaos.md and
// chaos.json into dir. It fails when a scenario did.
func reportChaos(rep *Report, dir string) error {
	fmt.Println()
	PrintChaosTable(os.Stdout, rep.Results)
	md, js, err := verify.WriteReportFiles(dir, "chaos.md", []byte(chaosMarkdown(rep)), "chaos.json", rep)
	if err != nil {
		return err
	}
	fmt.Printf("\n%s\nreport:  %s\nsummary: %s\n", rep.Verdicts, md, js)
	if !rep.Pass {
		return fmt.Errorf("chaos: %s", rep.Verdicts)
	}
	return nil
}

func secondsOf(v any) string { return fmt.Sprintf("%v s", v) }

func chaosMarkdown(rep *Report) string {
	var b strings.Builder
	c := rep.Config
	fmt.Fprintf(&b, "# flashgate chaos run, %s\n\n", rep.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "`%s`: %s in %.0f s. Each scenario ran on a fresh Redis, database, ledger and proxy "+
		"(Postgres server shared), under a burst of %v requests at %v/s (open model; a flash voucher for 30%% of "+
		"the requests; 10%% of the requests resend an earlier orderId; customers ordering twice against a limit of 1), "+
		"beside it clients that retry: %.0f%% more new orders, each sent again after the proxy's Retry-After while the "+
		"answer is a 503 or nothing, up to %d times; the fault %vs into the burst for %vs; and a probe sending one new "+
		"reserve every %s to a voucher of its own from the fault on. Ledger: %s (the periodic reconciler off; a scenario "+
		"that loses Redis' data on purpose adds %s and says why). Proxy: %s. Client timeout %vs.\n\n",
		rep.Command, rep.Verdicts, rep.Seconds, c["requestsPerScenario"], c["rate"], 100*retryingShare, load.RetryAttempts,
		c["faultAtSeconds"], c["faultForSeconds"], probeEvery, strings.Join(chaosLedgerEnv, ", "), strings.Join(reconcilerEnv, ", "),
		strings.Join(chaosProxyEnv, ", "), c["clientTimeoutSeconds"])
	fmt.Fprintf(&b, "The machine has %d CPUs and is shared (1-minute load average %.1f at the start): the load "+
		"generator, toxiproxy, Redis, Postgres, the ledger and the proxy all run on it, so the figures are this "+
		"machine's at that moment.\n\n", rep.CPUs, rep.LoadAvg)
	b.WriteString("| scenario | fault lasted | requests | 201 | 409 | 503 | errors | 503 p99 in fault | invariants | reserves answered again | Redis = DB | verdict |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %s | %.1f s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n",
			r.Scenario, r.FaultSeconds, r.Requests, r.Created, r.Refused, r.Unavailable, r.Errors,
			p99Of503(r), invariantsVerdict(r), seconds(r.RecoverySeconds), seconds(r.SettleSeconds), verify.Verdict(r.Pass))
	}
	fmt.Fprintf(&b, "\nBounds: reserves answered again within %s of the fault's end; Redis = DB within %s of the last request; "+
		"p99 of the 503s sent during the fault within %s plus twice the machine's load (the larger of the answers' p99 before the fault and the proxy's /healthz p99 while it lasted).\n", secondsOf(c["recoveryBoundSeconds"]), secondsOf(c["settleBoundSeconds"]), secondsOf(c["fast503Seconds"]))
	b.WriteString("\n*reserves answered again*: after the fault ended (toxic removed, process restarted and healthy), until the first of " +
		fmt.Sprint(probesInARow) + " probes in a row came back answered. *Redis = DB*: after the last request, until Redis held " +
		"exactly the database's remaining and orders on both vouchers, with nothing but the system at work (no reconciler, " +
		"except in the scenarios that lose Redis' data on purpose). *" + checkAgreement + "*: agreement.Compare (remaining, " +
		"orders, per-customer counts, terms) on every flash voucher, and *" + checkNoRepair + "*: no ledger's " +
		"flashgate_reconcile_fixes_total above 0 and no reconcile audited for the scenario's vouchers. " +
		"*errors*: no answer (transport error, timeout) or a status other than 2xx/409/422/503.\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n## %s: %s\n\n", r.Scenario, verify.Verdict(r.Pass))
		fmt.Fprintf(&b, "%s. The fault started %.2f s into the burst and lasted %.2f s.\n\n", r.Fault, r.FaultAt, r.FaultSeconds)
		if r.Error != "" {
			fmt.Fprintf(&b, "The harness could not run it: %s\n", r.Error)
			continue
		}
		fmt.Fprintf(&b, "Burst voucher %s (%d uses), probe voucher %s. Requested %.0f/s, achieved %.0f/s; "+
			"the retrying clients sent %d orders in %d requests; %d probes. "+
			"Answers: %s. While the fault lasted: %d requests, %d answered 201, %d answered 503 (p99 %.0f ms, max %.0f ms). "+
			"Resent by the clients' transport on a new connection (Idempotency-Key): %d.\n\n",
			r.Code, r.Stock, r.ProbeCode, r.Rate, r.Achieved, r.RetryingOrders, r.RetryingSends, r.Probes,
			verify.StatusLine(r.Statuses), r.DuringFault, r.DuringFault201, r.DuringFault503, r.DuringFault503P99, r.DuringFault503Max, r.Replays)
		if r.Latency != nil {
			fmt.Fprintf(&b, "Latency of every answer: p50 %.1f ms, p99 %.1f ms, max %.0f ms.\n\n", r.Latency.P50, r.Latency.P99, r.Latency.Max)
		}
		if len(r.ErrorSamples) > 0 {
			fmt.Fprintf(&b, "Errors seen: %s.\n\n", strings.Join(r.ErrorSamples, "; "))
		}
		for _, c := range r.Checks {
			fmt.Fprintf(&b, "- %s %s: %s\n", verify.Verdict(c.Pass), c.Name, c.Detail)
		}
		if len(r.Rounds) > 0 {
			b.WriteString(soakMarkdown(r))
		}
	}
	return b.String()
}
