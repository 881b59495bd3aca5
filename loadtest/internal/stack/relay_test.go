package stack

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingListener fails its first n Accepts as a process out of file
// descriptors does.
type failingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// A relay whose accepts fail for a while (EMFILE) goes on accepting once
// they succeed again, and relays to its backend (the chaos balancer's and
// the delay links' relay).
func TestRelayOutlivesAcceptErrors(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fl := &failingListener{Listener: ln}
	fl.n.Store(5)
	b := RelayOn(fl, func() net.Conn {
		up, err := net.Dial("tcp", backend.Addr().String())
		if err != nil {
			return nil
		}
		return up
	}, Copy)
	defer b.Close()

	c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err, "no answer through the relay after its accept errors")
	assert.Equal(t, "ping", string(buf))
	assert.Less(t, fl.n.Load(), int32(0), "the failing accepts were retried")
}
