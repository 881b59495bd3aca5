package systemtest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// linHistory collects operations from concurrent clients on one monotonic clock.
type linHistory struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
}

func newLinHistory() *linHistory { return &linHistory{start: time.Now()} }

func (h *linHistory) now() int64 { return time.Since(h.start).Nanoseconds() }

// add records one call. note (the raw answer or the error) shows in the
// visualization.
func (h *linHistory) add(client int, op linOp, call int64, r linResult, ret int64, note string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: client, Input: op, Call: call, Output: r, Return: ret, Metadata: note,
	})
}

// operations returns the history with every indeterminate call returning at
// the end of the history: it may take effect at any moment after its call.
func (h *linHistory) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := slices.Clone(h.ops)
	var end int64
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
	}
	for i := range ops {
		if ops[i].Output.(linResult).indeterminate() {
			ops[i].Return = end + 1
		}
	}
	stampTimes(ops)
	markContested(ops)
	return ops
}

// stampTimes copies each operation's times into its input for the model.
func stampTimes(ops []porcupine.Operation) {
	for i := range ops {
		in := ops[i].Input.(linOp)
		in.Call, in.Return = ops[i].Call, ops[i].Return
		ops[i].Input = in
	}
}

// markContested sets Contested on every reserve that overlapped in time with a
// reserve of the same orderId by another customer (an indeterminate one
// overlaps everything after its call): the gate may have held the orderId for
// that customer while this one asked.
func markContested(ops []porcupine.Operation) {
	for i := range ops {
		a := ops[i].Input.(linOp)
		if a.Kind != linReserve {
			continue
		}
		for _, other := range ops {
			b := other.Input.(linOp)
			if b.Kind == linReserve && b.Order == a.Order && b.Customer != a.Customer &&
				other.Call <= ops[i].Return && other.Return >= ops[i].Call {
				a.Contested = true
				ops[i].Input = a
				break
			}
		}
	}
}

func countIndeterminate(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		if op.Output.(linResult).indeterminate() {
			n++
		}
	}
	return n
}

func formatLinOp(op porcupine.Operation) string {
	note, _ := op.Metadata.(string)
	if len(note) > 120 {
		note = note[:120] + "..."
	}
	return fmt.Sprintf("client %d [%9.3fms .. %9.3fms] %-44s %s", op.ClientId,
		float64(op.Call)/1e6, float64(op.Return)/1e6,
		describeLinOp(op.Input.(linOp), op.Output.(linResult)), note)
}

func formatLinHistory(ops []porcupine.Operation) string {
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var b strings.Builder
	for _, op := range sorted {
		b.WriteString(formatLinOp(op))
		b.WriteByte('\n')
	}
	return b.String()
}

// linExcerpt shows where the search got stuck: the end of the longest legal

// summarizeLinHistory counts the answers of a history, to show what it covered.
func summarizeLinHistory(ops []porcupine.Operation) string {
	counts := map[string]int{}
	for _, op := range ops {
		in, r := op.Input.(linOp), op.Output.(linResult)
		k := linKindNames[in.Kind] + " "
		switch {
		case r.indeterminate():
			k += "?"
		case r.Code != "":
			k += r.Code
		default:
			k += fmt.Sprint(r.Status)
		}
		counts[k]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
