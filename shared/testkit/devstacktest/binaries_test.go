package devstacktest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrebuilt: FLASHGATE_TEST_BIN is used only when it holds every command
// asked for, whatever way the package is named.
func TestPrebuilt(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"ledger", "devstacktest"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/true\n"), 0o755))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "proxy"), 0o755)) // a directory is no command

	t.Setenv(PrebuiltEnv, "")
	assert.Empty(t, prebuilt([]string{"../ledger"}), "unset")

	t.Setenv(PrebuiltEnv, dir)
	assert.Equal(t, dir, prebuilt([]string{"../../../ledger"}))
	assert.Equal(t, dir, prebuilt([]string{"github.com/flashgate/flashgate/ledger"}))
	assert.Equal(t, dir, prebuilt([]string{"."}), "the test's own package")
	assert.Empty(t, prebuilt([]string{"../ledger", "../proxy"}), "proxy is missing")
	assert.Empty(t, prebuilt([]string{"../loadtest"}))
}
