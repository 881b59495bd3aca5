package stack

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A DelayLink relays every byte, in order, and each round trip through it
// takes at least the delay twice (once each way).
func TestDelayLink(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const delay = 2 * time.Millisecond
	l, err := StartDelayLink(echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, size := range []int{1, 100, 1 << 20} {
		sent := bytes.Repeat([]byte{byte('a' + i)}, size)
		start := time.Now()
		go func() { _, _ = c.Write(sent) }()
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("read %d bytes back: %v", size, err)
		}
		if took := time.Since(start); took < 2*delay {
			t.Errorf("a round trip of %d bytes took %v, want at least %v", size, took, 2*delay)
		}
		if !bytes.Equal(got, sent) {
			t.Errorf("%d bytes came back changed", size)
		}
	}
}

// hopURL moves a URL to another host:port, and keeps the rest.
func TestHopURL(t *testing.T) {
	got, err := hopURL("postgres://u:p@127.0.0.1:5432/db?sslmode=disable", "127.0.0.1:9")
	if err != nil || got != "postgres://u:p@127.0.0.1:9/db?sslmode=disable" {
		t.Errorf("hopURL = %q, %v", got, err)
	}
	if _, err := hopURL("not a url", "127.0.0.1:9"); err == nil {
		t.Error("hopURL of a URL without a host: no error")
	}
}
