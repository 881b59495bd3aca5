package limits

import (
	"os"
	"testing"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestMain stops the redis-server the benchmarks share.
func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }
