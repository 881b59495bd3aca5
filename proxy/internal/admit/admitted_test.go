package admit

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// TestPeersTakeOnlyWellFormedNotes: a proxy remembers the orders another
// proxy names, for their hold and customer, and ignores its own messages and
// any that are not a valid note.
func TestPeersTakeOnlyWellFormedNotes(t *testing.T) {
	p, err := newPeers(nil, nil)
	require.NoError(t, err)
	note := func(m peerMessage) string { b, _ := json.Marshal(m); return string(b) }
	p.take(note(peerMessage{Proxy: "other", Code: "SALE", HoldMS: 60_000, Orders: []peerOrder{{"o-1", 7}, {"bad order", 8}}}))
	p.take(note(peerMessage{Proxy: p.id, Code: "SALE", HoldMS: 60_000, Orders: []peerOrder{{"o-mine", 7}}}))
	p.take(note(peerMessage{Proxy: "other", Code: "bad:code", HoldMS: 60_000, Orders: []peerOrder{{"o-2", 7}}}))
	p.take(note(peerMessage{Proxy: "other", Code: "SALE", HoldMS: 0, Orders: []peerOrder{{"o-3", 7}}}))
	p.take(note(peerMessage{Proxy: "other", Code: "SALE", HoldMS: 60_000, Orders: make([]peerOrder, peerMaxBatch+1)}))
	p.take("not json")
	p.held.Wait()
	assert.True(t, p.heldElsewhere("SALE", voucher.Claim{OrderID: "o-1", CustomerID: 7}))
	assert.False(t, p.heldElsewhere("SALE", voucher.Claim{OrderID: "o-1", CustomerID: 8}), "another customer")
	assert.False(t, p.heldElsewhere("SALE", voucher.Claim{OrderID: "bad order", CustomerID: 8}), "an invalid orderId")
	assert.False(t, p.heldElsewhere("SALE", voucher.Claim{OrderID: "o-mine", CustomerID: 7}), "its own message")
	assert.False(t, p.heldElsewhere("bad:code", voucher.Claim{OrderID: "o-2", CustomerID: 7}), "an invalid code")
	assert.False(t, p.heldElsewhere("SALE", voucher.Claim{OrderID: "o-3", CustomerID: 7}), "no hold")
	assert.EqualValues(t, 1, p.received.Load())
	var none *peers
	assert.False(t, none.heldElsewhere("SALE", voucher.Claim{OrderID: "o-1", CustomerID: 7}), "no peers: nothing shared")
	none.admitted(peerNote{code: "SALE", order: "o-1", customer: 7, hold: time.Minute})
}

// TestPeersQueueAScriptCallsOrdersAtOnce: the orders one script call admitted
// reach the publisher as one entry of its queue (it wakes once for them), and
// a full queue drops and counts them all.
func TestPeersQueueAScriptCallsOrdersAtOnce(t *testing.T) {
	p, err := newPeers(nil, nil)
	require.NoError(t, err)
	ns := make([]peerNote, 3)
	for i := range ns {
		ns[i] = note("SALE", voucher.Claim{OrderID: fmt.Sprintf("o-%d", i), CustomerID: 7}, time.Minute)
	}
	p.admitted(ns...)
	require.Len(t, p.notes, 1, "queued entries for one script call's 3 orders")
	assert.Len(t, <-p.notes, 3)
	for range peerQueue {
		p.admitted(ns[0])
	}
	p.admitted(ns...)
	assert.EqualValues(t, 3, p.dropped.Load(), "orders dropped by a full queue")
}
