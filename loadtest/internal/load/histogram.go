package load

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/shared/api"
)

// ServerHistogram is the proxy's own view of the reserves' latency: the
// cumulative buckets of flashgate_http_request_duration_seconds for
// POST /vouchers/:code/reservations, every status together. Subtracting two
// readings gives a run's: what the server spent, without the time a request
// waited in the load generator or the kernel on a machine they share.
type ServerHistogram map[float64]float64 // upper bound (s) -> cumulative count

var reserveRoute = `route="` + api.RouteReservations + `"`

// ReadServerHistogram reads the reserve route's latency histogram from the
// /metrics of the server at url.
func ReadServerHistogram(ctx context.Context, url string) (ServerHistogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+api.MetricsPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s/metrics: %w", url, err)
	}
	defer resp.Body.Close()
	h := ServerHistogram{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "flashgate_http_request_duration_seconds_bucket{") ||
			!strings.Contains(line, reserveRoute) || !strings.Contains(line, `method="POST"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		le, rest, _ := strings.Cut(rest, `"`)
		bound, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			bound, err = math.Inf(1), nil
		}
		v, err2 := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndex(rest, " ")+1:]), 64)
		if err != nil || err2 != nil {
			continue
		}
		h[bound] += v
	}
	return h, sc.Err()
}

// Since is h minus an earlier reading.
func (h ServerHistogram) Since(before ServerHistogram) ServerHistogram {
	d := ServerHistogram{}
	for b, v := range h {
		d[b] = v - before[b]
	}
	return d
}

// Quantile returns the upper bound of the bucket holding the q-th quantile
// (0 < q <= 1) and the count; +Inf when it lies past the last finite bound.
func (h ServerHistogram) Quantile(q float64) (float64, int) {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return 0, 0
	}
	total := h[bounds[len(bounds)-1]]
	for _, b := range bounds {
		if h[b] >= q*total {
			return b, int(total)
		}
	}
	return math.Inf(1), int(total)
}
