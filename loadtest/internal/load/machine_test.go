package load

import (
	"syscall"
	"testing"
)

// RaiseOpenFiles never lowers the limit, and what it returns is in force.
func TestRaiseOpenFiles(t *testing.T) {
	var before, after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	got := RaiseOpenFiles()
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	if after.Cur < before.Cur || got != after.Cur {
		t.Fatalf("RaiseOpenFiles() = %d, limit %d -> %d, want the limit in force and never lower", got, before.Cur, after.Cur)
	}
}
