//go:build !linux

package load

import "context"

// loopSupported: without epoll the lean sender is sendWorkers.
const loopSupported = false

func sendLoop(ctx context.Context, target string, bodies [][]byte, plan Plan, rate float64, o AttackOptions) (Volley, error) {
	return sendWorkers(ctx, target, bodies, plan, rate, o)
}
