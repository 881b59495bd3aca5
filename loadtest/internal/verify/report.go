package verify

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// Summary is one burst's figures and verdicts, as printed and as summary.json.
type Summary struct {
	Label             string  `json:"label"`
	Code              string  `json:"code"`
	URL               string  `json:"url"`
	Flash             bool    `json:"flash"`
	Stock             int     `json:"stock"`
	PerUser           int     `json:"perUser"`
	Customers         int     `json:"customers"`
	DistinctCustomers int     `json:"distinctCustomers"`
	Retry             float64 `json:"retryShare"`

	Requests        int     `json:"requests"`
	Orders          int     `json:"orders"`
	Retries         int     `json:"retries"`
	Answered        int     `json:"answered"`
	RequestedRate   float64 `json:"requestedRate"`
	AchievedRate    float64 `json:"achievedRate"`
	DurationSeconds float64 `json:"durationSeconds"`
	SendSeconds     float64 `json:"sendSeconds"`  // first to last request sent
	DrainSeconds    float64 `json:"drainSeconds"` // last request sent to last answer read

	CPU          *load.CPUUse   `json:"cpu,omitempty"`
	Statuses     map[string]int `json:"statuses"`    // "201", "409 OUT_OF_STOCK", "transport error"
	Errors       int            `json:"errors"`      // no answer, or not 2xx/409/422
	Unavailable  int            `json:"unavailable"` // answers 503 (shed or unavailable), among Errors
	ErrorRate    float64        `json:"errorRate"`
	ErrorSamples []string       `json:"errorSamples,omitempty"`
	All          load.Latency   `json:"latencyAll"`
	Admitted     load.Latency   `json:"latencyAdmitted"` // answers 201
	Histogram    []load.Bucket  `json:"histogram"`

	AdmittedOrders int        `json:"admittedOrders"` // distinct orderIds answered 201
	Demand         int        `json:"demand"`         // uses the orders could take given the per-user limit
	Expected       int        `json:"expectedAdmitted"`
	DB             *DBSummary `json:"db,omitempty"`
	RedisRemaining *int64     `json:"redisRemaining,omitempty"`
	Commits        *Commits   `json:"commits,omitempty"`
	Checks         []Check    `json:"checks,omitempty"`
	Pass           bool       `json:"pass"`              // every invariant held
	Verdict        *Judgement `json:"verdict,omitempty"` // the whole burst's (Judge), when judged

	Shots []load.Shot `json:"-"` // for the plot (not in the JSON)
}

// DBSummary is the voucher in the database after the burst.
type DBSummary struct {
	TotalLimit int            `json:"totalLimit"`
	Used       int            `json:"usedCount"`
	Active     int            `json:"activeRows"`
	Remaining  int            `json:"remaining"`
	ByStatus   map[string]int `json:"rowsByStatus"`
}

// Commits is what the burst cost Postgres: the xact_commit delta of the
// database over the burst, less the harness's own reads (every other client's
// commits count, the ledger's background jobs included; read-only
// transactions count too).
type Commits struct {
	Delta         int64   `json:"delta"`
	PerAdmitted   float64 `json:"perAdmitted"`
	WaitedSeconds float64 `json:"statsWaitSeconds"`
}

// PrintSummary writes s for a terminal.
func PrintSummary(w io.Writer, s *Summary) {
	kind := "standard"
	if s.Flash {
		kind = "flash"
	}
	fmt.Fprintf(w, "\n== %s: %s voucher %s, stock %d, per-user %d\n", s.Label, kind, s.Code, s.Stock, s.PerUser)
	fmt.Fprintf(w, "traffic   %d requests: %d orders from %d customers, %d retries (%.0f%%); demand %d uses\n",
		s.Requests, s.Orders, s.DistinctCustomers, s.Retries, 100*s.Retry, s.Demand)
	fmt.Fprintf(w, "rate      requested %.0f/s, achieved %.0f/s (sent over %.2fs; last answer %.3fs after the last send)\n",
		s.RequestedRate, s.AchievedRate, s.SendSeconds, s.DrainSeconds)
	if c := s.CPU; c != nil {
		fmt.Fprintf(w, "cpu       %.0f%% of %d CPUs busy while sending: load generator %.2f (%.0f us of CPU per request), flashgate stack %s, other processes %.2f CPUs (load average %.1f at the start)\n",
			100*c.MachineBusy, c.CPUs, c.GeneratorCores, c.GeneratorMicros, c.Stack(), c.OtherCores, c.LoadAvg)
		if by := c.ByProcess(); by != "" {
			fmt.Fprintf(w, "cpu/req   by process (the run's own, from /proc): %s\n", by)
		}
	}
	fmt.Fprintf(w, "answers   %s\n", StatusLine(s.Statuses))
	fmt.Fprintf(w, "errors    %d (%.2f%%), %d of them 503 shed/unavailable", s.Errors, 100*s.ErrorRate, s.Unavailable)
	if len(s.ErrorSamples) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(s.ErrorSamples, "; "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency   %-9s %8s %8s %8s %8s %8s  (ms)\n", "", "p50", "p90", "p99", "p99.9", "max")
	for _, l := range []struct {
		name string
		l    load.Latency
	}{{"all", s.All}, {"201", s.Admitted}} {
		fmt.Fprintf(w, "          %-9s %8.2f %8.2f %8.2f %8.2f %8.2f  n=%d\n", l.name, l.l.P50, l.l.P90, l.l.P99, l.l.P999, l.l.Max, l.l.Count)
	}
	fmt.Fprintf(w, "admitted  %d orders answered 201 (expected %d)\n", s.AdmittedOrders, s.Expected)
	if s.DB != nil {
		fmt.Fprintf(w, "database  used_count %d of %d, %d active rows", s.DB.Used, s.DB.TotalLimit, s.DB.Active)
		if s.RedisRemaining != nil {
			fmt.Fprintf(w, "; Redis remaining %d, DB remaining %d", *s.RedisRemaining, s.DB.Remaining)
		}
		fmt.Fprintln(w)
	}
	if c := s.Commits; c != nil {
		fmt.Fprintf(w, "postgres  %d commits for %d admitted = %.3f commits per admitted reservation\n",
			c.Delta, s.AdmittedOrders, c.PerAdmitted)
	}
	if len(s.Checks) > 0 {
		fmt.Fprintln(w, "invariants")
		for _, c := range s.Checks {
			fmt.Fprintf(w, "  %s  %-32s %s\n", Verdict(c.Pass), c.Name, c.Detail)
		}
	}
	if v := s.Verdict; v != nil {
		fmt.Fprintf(w, "verdict   %s\n", v.Line(s))
	}
}

// Verdict is "PASS" or "FAIL".
func Verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// StatusLine lists answer counts, most frequent first.
func StatusLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ", ")
}

// WriteReport writes report.html and summary.json for s into dir and returns
// their paths.
func WriteReport(dir string, s *Summary) (htmlPath, jsonPath string, err error) {
	var page bytes.Buffer
	if err := renderReport(&page, s); err != nil {
		return "", "", err
	}
	return WriteReportFiles(dir, "report.html", page.Bytes(), "summary.json", s)
}

// WriteReportFiles is how every command leaves its report: into dir (made if
// missing) the page for people, pageName (HTML or markdown), and beside it v as
// indented JSON, jsonName, for programs. It returns both paths.
func WriteReportFiles(dir, pageName string, page []byte, jsonName string, v any) (pagePath, jsonPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", "", err
	}
	jsonPath, pagePath = filepath.Join(dir, jsonName), filepath.Join(dir, pageName)
	if err := os.WriteFile(jsonPath, append(raw, '\n'), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pagePath, page, 0o644); err != nil {
		return "", "", err
	}
	return pagePath, jsonPath, nil
}

// latencyPlot renders vegeta's latency-over-time plot (a whole HTML page) of
// the shots, one series per kind of answer (plotLabel), with its legend moved
// above the plot, where the report's frame shows it.
func latencyPlot(s *Summary) (string, error) {
	p := plot.New(plot.Title(s.Label+" "+s.Code+": latency over time"), plot.Downsample(4000),
		plot.Label(func(r *vegeta.Result) string { return plotLabel(r.Code) }))
	// The plot takes every result in sequence order and wants their times
	// never to step back: each of several event loops stamps its own
	// requests, so the plan's order may step back a few microseconds. The
	// plot's sequence is the order they were sent in.
	shots := slices.Clone(s.Shots)
	slices.SortFunc(shots, func(a, b load.Shot) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Seq, b.Seq)) })
	for i := range shots {
		sh := &shots[i]
		if err := p.Add(&vegeta.Result{Attack: s.Label, Seq: uint64(i), Code: sh.Status, Timestamp: sh.At, Latency: sh.Latency}); err != nil {
			return "", err
		}
	}
	p.Close()
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		return "", err
	}
	return strings.Replace(b.String(), "</head>", plotLegendOnTop+"</head>", 1), nil
}

// plotLabel names the series of an answer's status. vegeta draws a series
// whose label holds "ERROR" in red and the others in its success colours, so
// each failure says ERROR; 503s, the answers a service sheds or gives when a
// dependency is down, are a series of their own, apart from other failures.
func plotLabel(status uint16) string {
	switch status {
	case 0:
		return "ERROR no answer (transport)"
	case http.StatusCreated:
		return "201 admitted"
	case http.StatusConflict, http.StatusUnprocessableEntity:
		return strconv.Itoa(int(status)) + " refused"
	case http.StatusServiceUnavailable:
		return "ERROR 503 shed/unavailable"
	}
	return "ERROR " + strconv.Itoa(int(status))
}

// plotLegendOnTop puts uPlot's legend (which series is which colour) above
// the plot instead of below its 500 px, and trims the page's margins, so
// that the report's frame shows it without scrolling.
const plotLegendOnTop = `<style>
body{padding:8px}.header{margin-bottom:8px}.chart-container{padding:8px}
.uplot{display:flex;flex-direction:column}.uplot .u-legend{order:-1;margin:0 0 8px}
</style>
`

type bar struct {
	Range     string
	All, OK   int
	AllW, OKW float64 // bar widths in percent of the largest bucket
}

func renderReport(w io.Writer, s *Summary) error {
	plotPage, err := latencyPlot(s)
	if err != nil {
		return fmt.Errorf("latency plot: %w", err)
	}
	most, mostOK := 1, 1
	for _, b := range s.Histogram {
		most, mostOK = max(most, b.All), max(mostOK, b.OK)
	}
	var bars []bar
	for _, b := range s.Histogram {
		r := fmt.Sprintf("%g – %g ms", b.FromMs, b.ToMs)
		if b.ToMs == 0 {
			r = fmt.Sprintf("≥ %g ms", b.FromMs)
		}
		bars = append(bars, bar{Range: r, All: b.All, OK: b.OK,
			AllW: 100 * float64(b.All) / float64(most), OKW: 100 * float64(b.OK) / float64(mostOK)})
	}
	js, _ := json.MarshalIndent(s, "", "  ")
	return reportTemplate.Execute(w, map[string]any{
		"S": s, "Bars": bars, "Plot": plotPage, "Statuses": StatusLine(s.Statuses), "JSON": string(js),
	})
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"verdict": Verdict,
	"pct":     func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"f":       func(f float64) string { return fmt.Sprintf("%.2f", f) },
	"f0":      func(f float64) string { return fmt.Sprintf("%.0f", f) },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>flashgate burst {{.S.Code}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td.l,th.l{text-align:left}
.PASS{color:#176b1c;font-weight:bold}.FAIL{color:#b00020;font-weight:bold}
.bar{height:10px;background:#4a7fb5;display:inline-block}.bar.ok{background:#3c9a4a}
iframe{width:100%;height:680px;border:1px solid #ccc}
</style></head><body>
{{with .S.Verdict}}<h1>{{$.S.Label}}: voucher {{$.S.Code}} <span class="{{verdict .Pass}}">{{verdict .Pass}}</span></h1>
{{range .Reasons}}<p class="FAIL">{{.}}</p>{{end}}
{{else}}<h1>{{.S.Label}}: voucher {{.S.Code}} <span class="{{verdict .S.Pass}}">{{if .S.Checks}}{{verdict .S.Pass}}{{end}}</span></h1>{{end}}
<p>{{if .S.Flash}}Flash{{else}}Standard{{end}} voucher, stock {{.S.Stock}}, per-user limit {{.S.PerUser}}.
{{.S.Requests}} requests ({{.S.Orders}} orders from {{.S.DistinctCustomers}} customers, {{.S.Retries}} retries) to <code>{{.S.URL}}</code>.</p>
<table>
<tr><th class="l">rate requested</th><td>{{f0 .S.RequestedRate}}/s</td></tr>
<tr><th class="l">rate achieved</th><td>{{f0 .S.AchievedRate}}/s</td></tr>
<tr><th class="l">sent over / drain</th><td>{{f .S.SendSeconds}} s / {{f .S.DrainSeconds}} s</td></tr>
{{with .S.CPU}}<tr><th class="l">CPU while sending</th><td>{{pct .MachineBusy}} of {{.CPUs}} CPUs busy: load generator {{f .GeneratorCores}} ({{f0 .GeneratorMicros}} µs of CPU per request), flashgate stack {{.Stack}}, other processes {{f .OtherCores}} CPUs; load average {{f .LoadAvg}}</td></tr>
{{with .ByProcess}}<tr><th class="l">CPU per request by process</th><td>{{.}}</td></tr>{{end}}{{end}}
<tr><th class="l">answers</th><td>{{.Statuses}}</td></tr>
<tr><th class="l">errors</th><td>{{.S.Errors}} ({{pct .S.ErrorRate}}), {{.S.Unavailable}} of them 503 shed/unavailable {{range .S.ErrorSamples}}<br>{{.}}{{end}}</td></tr>
<tr><th class="l">orders admitted (201)</th><td>{{.S.AdmittedOrders}} (expected {{.S.Expected}})</td></tr>
{{with .S.DB}}<tr><th class="l">database</th><td>used_count {{.Used}} / {{.TotalLimit}}, {{.Active}} active rows</td></tr>{{end}}
{{with .S.RedisRemaining}}<tr><th class="l">Redis remaining</th><td>{{.}}</td></tr>{{end}}
{{with .S.Commits}}<tr><th class="l">Postgres commits</th><td>{{.Delta}} = {{f .PerAdmitted}} per admitted reservation</td></tr>{{end}}
</table>
{{if .S.Checks}}<h2>Invariants</h2>
<table><tr><th></th><th class="l">invariant</th><th class="l">detail</th></tr>
{{range .S.Checks}}<tr><td class="{{verdict .Pass}}">{{verdict .Pass}}</td><td class="l">{{.Name}}</td><td class="l">{{.Detail}}</td></tr>
{{end}}</table>{{end}}
<h2>Latency (ms)</h2>
<table><tr><th class="l"></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{with .S.All}}<tr><th class="l">all</th><td>{{.Count}}</td><td>{{f .Mean}}</td><td>{{f .P50}}</td><td>{{f .P90}}</td><td>{{f .P99}}</td><td>{{f .P999}}</td><td>{{f .Max}}</td></tr>{{end}}
{{with .S.Admitted}}<tr><th class="l">201</th><td>{{.Count}}</td><td>{{f .Mean}}</td><td>{{f .P50}}</td><td>{{f .P90}}</td><td>{{f .P99}}</td><td>{{f .P999}}</td><td>{{f .Max}}</td></tr>{{end}}
</table>
<h2>Latency histogram</h2>
<table><tr><th class="l">latency</th><th>all</th><th class="l"></th><th>201</th><th class="l"></th></tr>
{{range .Bars}}<tr><td class="l">{{.Range}}</td><td>{{.All}}</td><td class="l" style="width:300px"><span class="bar" style="width:{{printf "%.1f" .AllW}}%"></span></td>
<td>{{.OK}}</td><td class="l" style="width:300px"><span class="bar ok" style="width:{{printf "%.1f" .OKW}}%"></span></td></tr>
{{end}}</table>
<h2>Latency over time</h2>
<p>One line per kind of answer, its legend at the top of the plot: 201 admitted, 409 and 422 refused, and in red the failures:
503 shed/unavailable (a service at its bound, or a dependency down), other statuses by code, and no answer at all.</p>
<iframe srcdoc="{{.Plot}}"></iframe>
<h2>summary.json</h2>
<pre>{{.JSON}}</pre>
</body></html>
`))

// DefaultOut is loadtest/reports/<name>-<timestamp> under the working directory.
func DefaultOut(name string) string {
	return filepath.Join("loadtest", "reports", name+"-"+time.Now().Format("20060102-150405"))
}
