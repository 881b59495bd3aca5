package ops

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestCompose loads ../docker-compose.yml with compose-go as the Compose v2
// specification (validation, interpolation and normalization on), with no
// environment set, and checks what the issue asked of it: the ledger's admin
// port on loopback by default, no top-level name (Compose v1 refuses it),
// and every service environment name a setting the service reads.
func TestCompose(t *testing.T) {
	path, err := filepath.Abs("../docker-compose.yml")
	require.NoError(t, err)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var top map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &top))
	assert.NotContains(t, top, "name", "Compose v1 (docker-compose 1.29) refuses a top-level name")

	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: raw}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("flashgate", true) })
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"redis", "postgres", "ledger", "proxy"}, project.ServiceNames())

	ledger, err := project.GetService("ledger")
	require.NoError(t, err)
	require.Len(t, ledger.Ports, 1)
	assert.Equal(t, "127.0.0.1", ledger.Ports[0].HostIP, "the ledger's admin port is published on loopback only by default")
	assert.Equal(t, uint32(8081), ledger.Ports[0].Target)

	for _, name := range []string{"ledger", "proxy"} {
		svc, err := project.GetService(name)
		require.NoError(t, err)
		settings := settingsOf(t, name)
		for key := range svc.Environment {
			assert.Contains(t, settings, key, "docker-compose.yml: %s's %s is not a setting it reads", name, key)
		}
	}

	// LEDGER_BIND opens it up on purpose.
	project, err = loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: filepath.Dir(path), ConfigFiles: []types.ConfigFile{{Filename: path, Content: raw}},
		Environment: types.Mapping{"LEDGER_BIND": "0.0.0.0"},
	}, func(o *loader.Options) { o.SetProjectName("flashgate", true) })
	require.NoError(t, err)
	ledger, err = project.GetService("ledger")
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0", ledger.Ports[0].HostIP)
}
