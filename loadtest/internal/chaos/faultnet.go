package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// faultNet is toxiproxy embedded in this process: one TCP proxy per link, on
// which toxics (latency, resets, stalls) are switched on and off.
type faultNet struct {
	server *toxiproxy.ApiServer
}

func newFaultNet() *faultNet {
	return &faultNet{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Link starts a proxy named name in front of upstream and returns the address
// it listens on.
func (f *faultNet) Link(name, upstream string) (string, error) {
	p := toxiproxy.NewProxy(f.server, name, "127.0.0.1:0", upstream)
	if err := f.server.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	return p.Listen, nil
}

// AddToxic switches a toxic on: typ is toxiproxy's name for it ("latency",
// "reset_peer", "timeout"), stream "upstream" (towards the server) or
// "downstream" (its replies).
func (f *faultNet) AddToxic(link, typ, stream string, attrs map[string]any) error {
	p, err := f.server.Collection.Get(link)
	if err != nil {
		return fmt.Errorf("toxiproxy %s: %w", link, err)
	}
	body, err := json.Marshal(map[string]any{
		"name": typ + "_" + stream, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		return err
	}
	if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("toxiproxy %s: add %s: %w", link, typ, err)
	}
	return nil
}

// Heal removes every toxic from every link. A timeout toxic closes the
// connections it stalled as it goes.
func (f *faultNet) Heal(ctx context.Context) {
	for _, p := range f.server.Collection.Proxies() {
		p.Toxics.ResetToxics(ctx)
	}
}

// Close stops every link and closes its connections.
func (f *faultNet) Close() { _ = f.server.Collection.Clear() }
