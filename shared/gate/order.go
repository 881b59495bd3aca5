package gate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed order.lua
	orderLua string

	orderScript = newScript(orderLua)
)

// OrderKey is the key naming the log voucher an orderId is promised on
// (order.lua), in the order's own slot. orderID must be valid
// (voucher.ValidOrderID: no braces).
func OrderKey(orderID string) string { return "flashgate:order:{" + orderID + "}" }

// ClaimOrders names code as the log voucher each of orderIDs is promised on,
// until expires, unless another voucher holds it: owners[i] is then that
// voucher (code when claimed or already code's). errs[i] is the failure of
// one claim. The calls go in one pipeline when the client has them (a
// *redis.Client or *redis.ClusterClient), one key per order in its own
// slot.
func (g *Gate) ClaimOrders(ctx context.Context, code string, orderIDs []string, expires time.Time) (owners []string, errs []error) {
	owners, errs = make([]string, len(orderIDs)), make([]error, len(orderIDs))
	if err := checkCode(code); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return owners, errs
	}
	replies := g.orderCalls(ctx, orderIDs, "claim", code, expires.UnixMilli())
	for i, r := range replies {
		if r.err != nil {
			errs[i] = fmt.Errorf("claim order %s for %s: %w", orderIDs[i], code, r.err)
			continue
		}
		owner, ok := r.v.(string)
		if !ok {
			errs[i] = fmt.Errorf("claim order %s for %s: unexpected reply %v: %w", orderIDs[i], code, r.v, ErrBadState)
			continue
		}
		owners[i] = owner
	}
	return owners, errs
}

// FreeOrders deletes the claims of orderIDs that code holds.
func (g *Gate) FreeOrders(ctx context.Context, code string, orderIDs ...string) error {
	if err := checkCode(code); err != nil {
		return err
	}
	var errs []error
	for i, r := range g.orderCalls(ctx, orderIDs, "free", code) {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("free order %s of %s: %w", orderIDs[i], code, r.err))
		}
	}
	return errors.Join(errs...)
}

// orderReply is one order.lua call's answer.
type orderReply struct {
	v   any
	err error
}

// pipeliner is a client that sends commands in pipelines.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// orderCalls runs order.lua once per orderId (args after the operation), in
// one pipeline when the client has them, else one call after another.
func (g *Gate) orderCalls(ctx context.Context, orderIDs []string, args ...any) []orderReply {
	out := make([]orderReply, len(orderIDs))
	if len(orderIDs) == 0 {
		return out
	}
	p, ok := g.rdb.(pipeliner)
	if !ok {
		for i, id := range orderIDs {
			out[i].v, out[i].err = g.run(ctx, orderScript, []string{OrderKey(id)}, args...)
		}
		return out
	}
	g.calls.Add(int64(len(orderIDs)))
	cmds := orderPipeline(ctx, p, orderIDs, false, args)
	noScript := false
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			noScript = true
		}
	}
	if noScript { // Redis lost its script cache: send the script itself
		cmds = orderPipeline(ctx, p, orderIDs, true, args)
	}
	for i, c := range cmds {
		out[i].v, out[i].err = c.Result()
	}
	return out
}

// orderPipeline sends one order.lua call per orderId in one pipeline, by
// its SHA or (source) its text.
func orderPipeline(ctx context.Context, p pipeliner, orderIDs []string, source bool, args []any) []*redis.Cmd {
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(orderIDs))
	for i, id := range orderIDs {
		keys := []string{OrderKey(id)}
		if source {
			cmds[i] = orderScript.Eval(ctx, pipe, keys, args...)
		} else {
			cmds[i] = orderScript.EvalSha(ctx, pipe, keys, args...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	return cmds
}
