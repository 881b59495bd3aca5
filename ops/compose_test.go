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

// composeSecrets are the variables docker-compose.yml requires (no default
// token ships in it), with values for the test: a new map each time, as the
// loader adds to the one it gets.
func composeSecrets() types.Mapping {
	return types.Mapping{
		"LEDGER_TOKEN": "test-admin-token", "PROXY_LEDGER_TOKEN": "test-proxy-ledger-token", "PROXY_TOKEN": "test-edge-token",
	}
}

// TestCompose loads ../docker-compose.yml with compose-go as the Compose v2
// specification (validation, interpolation and normalization on), with only
// the required secrets set, and checks what the issue asked of it: the
// ledger's admin port on loopback by default, no top-level name (Compose v1
// refuses it), every service environment name a setting the service reads,
// and the tokens: none ships in the file, each is required, the proxy holds
// an internal-scoped ledger token and a client token.
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
		Environment: composeSecrets(),
	}, func(o *loader.Options) { o.SetProjectName("flashgate", true) })
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"redis", "postgres", "kafka", "kafka-init", "ledger", "proxy"}, project.ServiceNames())

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

	checkComposeTokens(t, project, path, raw)

	// LEDGER_BIND opens it up on purpose.
	withBind := composeSecrets()
	withBind["LEDGER_BIND"] = "0.0.0.0"
	project, err = loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: filepath.Dir(path), ConfigFiles: []types.ConfigFile{{Filename: path, Content: raw}},
		Environment: withBind,
	}, func(o *loader.Options) { o.SetProjectName("flashgate", true) })
	require.NoError(t, err)
	ledger, err = project.GetService("ledger")
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0", ledger.Ports[0].HostIP)
}

// checkComposeTokens checks the tokens of a loaded project: the ledger has
// the admin token and the proxy's, scoped internal; the proxy sends that one
// and requires its own client token (its edge is never open); the file holds
// no token of its own (no dev-token, no default); and a load without each
// required variable fails naming it.
func checkComposeTokens(t *testing.T, project *types.Project, path string, raw []byte) {
	t.Helper()
	assert.NotContains(t, string(raw), "dev-token", "docker-compose.yml ships no token")
	ledger, err := project.GetService("ledger")
	require.NoError(t, err)
	proxy, err := project.GetService("proxy")
	require.NoError(t, err)
	env := func(svc types.ServiceConfig, key string) string {
		if v := svc.Environment[key]; v != nil {
			return *v
		}
		return ""
	}
	assert.Equal(t, "test-admin-token", env(ledger, "LEDGER_TOKEN"))
	assert.Equal(t, "proxy:test-proxy-ledger-token:internal", env(ledger, "LEDGER_TOKENS"), "the proxy's ledger token holds internal only")
	assert.Equal(t, "test-proxy-ledger-token", env(proxy, "LEDGER_TOKEN"))
	assert.Equal(t, "test-edge-token", env(proxy, "PROXY_TOKEN"))
	assert.NotContains(t, proxy.Environment, "PROXY_AUTH", "the edge requires a token")

	for name := range composeSecrets() {
		without := composeSecrets()
		delete(without, name)
		_, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir: filepath.Dir(path), ConfigFiles: []types.ConfigFile{{Filename: path, Content: raw}},
			Environment: without,
		}, func(o *loader.Options) { o.SetProjectName("flashgate", true) })
		if assert.Error(t, err, "docker-compose.yml without %s", name) {
			assert.Contains(t, err.Error(), name)
		}
	}
}
