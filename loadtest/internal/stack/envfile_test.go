package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteEnvFile: bash reads every value back as written, the file is its
// owner's alone, and remove leaves a file another stack wrote since.
func TestWriteEnvFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "run.env")
	vars := []EnvVar{{"FLASHGATE_PROXY", "http://127.0.0.1:1"}, {"ODD", `it's "$HOME" \n; $(x)`}}
	remove, err := WriteEnvFile(path, "line one\nline two", vars)
	require.NoError(t, err)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	out, err := exec.Command("bash", "-c", `. "$1" && printf '%s|%s' "$FLASHGATE_PROXY" "$ODD"`, "-", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, `http://127.0.0.1:1|it's "$HOME" \n; $(x)`, string(out))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".run.env*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file left behind")

	remove()
	assert.NoFileExists(t, path)

	remove, err = WriteEnvFile(path, "first", vars)
	require.NoError(t, err)
	_, err = WriteEnvFile(path, "second", vars)
	require.NoError(t, err)
	remove()
	assert.FileExists(t, path, "the first stack's remove leaves the second's file")
}
