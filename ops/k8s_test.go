package ops

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// kustomization is the part of kustomize's Kustomization these files use;
// decoding is strict, so a field kustomize would not know fails here too.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
}

// strict decodes one YAML document into out, refusing unknown fields.
func strict(t *testing.T, where string, doc []byte, out any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	require.NoError(t, err, where)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(out), "%s: not a valid %T", where, out)
}

// documents splits a YAML file into its documents.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

// manifests are the base's objects, decoded strictly into the API's types.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
}

func decodeAll(t *testing.T, files ...string) manifests {
	t.Helper()
	m := manifests{map[string]*appsv1.Deployment{}, map[string]*corev1.Service{}, map[string]*corev1.ConfigMap{},
		map[string]*corev1.Secret{}, map[string]*policyv1.PodDisruptionBudget{}, map[string]*autoscalingv2.HorizontalPodAutoscaler{}}
	for _, f := range files {
		for i, doc := range documents(t, f) {
			where := f + " #" + strconv.Itoa(i+1)
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			require.NoError(t, yaml.Unmarshal(doc, &head), where)
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				o := &appsv1.Deployment{}
				strict(t, where, doc, o)
				m.deployments[o.Name] = o
			case "v1 Service":
				o := &corev1.Service{}
				strict(t, where, doc, o)
				m.services[o.Name] = o
			case "v1 ConfigMap":
				o := &corev1.ConfigMap{}
				strict(t, where, doc, o)
				m.configMaps[o.Name] = o
			case "v1 Secret":
				o := &corev1.Secret{}
				strict(t, where, doc, o)
				m.secrets[o.Name] = o
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				strict(t, where, doc, o)
				m.pdbs[o.Name] = o
			case "autoscaling/v2 HorizontalPodAutoscaler":
				o := &autoscalingv2.HorizontalPodAutoscaler{}
				strict(t, where, doc, o)
				m.hpas[o.Name] = o
			default:
				t.Errorf("%s: unexpected %s %s", where, head.APIVersion, head.Kind)
			}
		}
	}
	return m
}

// checkKustomization reads dir's kustomization.yaml strictly and checks that
// it lists every YAML file beside it (as a resource or a patch) and only
// files or directories that exist.
func checkKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	var k kustomization
	docs := documents(t, filepath.Join(dir, "kustomization.yaml"))
	require.Len(t, docs, 1)
	strict(t, dir+"/kustomization.yaml", docs[0], &k)
	assert.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion)
	assert.Equal(t, "Kustomization", k.Kind)
	listed := slices.Clone(k.Resources)
	for _, p := range k.Patches {
		listed = append(listed, p.Path)
	}
	for _, l := range listed {
		_, err := os.Stat(filepath.Join(dir, l))
		assert.NoError(t, err, "%s lists %s", dir, l)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(listed, name) {
			t.Errorf("%s/kustomization.yaml does not list %s", dir, name)
		}
	}
	return k
}

// settingsOf runs bin/<service> --help and returns the settings it lists.
func settingsOf(t *testing.T, service string) map[string]string {
	t.Helper()
	bin := filepath.Join(devstacktest.Binaries(t, "../ledger", "../proxy"), service)
	out, err := exec.Command(bin, "--help").Output()
	require.NoError(t, err, "%s --help", service)
	settings := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  ([A-Z][A-Z0-9_]+) +(\S+)`).FindAllStringSubmatch(string(out), -1) {
		settings[m[1]] = m[2]
	}
	require.NotEmpty(t, settings, "%s --help lists no setting:\n%s", service, out)
	return settings
}

// TestKubernetesBase decodes every manifest of the base into the Kubernetes API
// types and checks them against the services' real settings: env names the
// service reads (its --help), probes on /readyz and /healthz on the port its
// ADDR listens on, a preStop pause of SHUTDOWN_DELAY and a grace period
// covering SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT, resources, Services, PDBs, the
// proxy's HPA, the secrets (checkSecretRefs), and Redis and Postgres as
// ExternalName Services that the URLs name.
func TestKubernetesBase(t *testing.T) {
	k := checkKustomization(t, "k8s/base")
	var files []string
	for _, r := range k.Resources {
		files = append(files, filepath.Join("k8s/base", r))
	}
	m := decodeAll(t, files...)
	for _, svc := range []struct{ name, addrVar string }{{"ledger", "LEDGER_ADDR"}, {"proxy", "PROXY_ADDR"}} {
		t.Run(svc.name, func(t *testing.T) {
			checkService(t, m, svc.name, svc.addrVar, settingsOf(t, svc.name))
		})
	}
	hpa := m.hpas["flashgate-proxy"]
	if assert.NotNil(t, hpa, "an HPA for the proxy") {
		assert.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
		assert.Equal(t, "flashgate-proxy", hpa.Spec.ScaleTargetRef.Name)
		assert.Less(t, *hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
	for _, name := range []string{"flashgate-redis", "flashgate-postgres"} {
		s := m.services[name]
		if assert.NotNil(t, s, name) {
			assert.Equal(t, corev1.ServiceTypeExternalName, s.Spec.Type, name)
			assert.NotEmpty(t, s.Spec.ExternalName, name)
		}
	}
	assert.Contains(t, m.configMaps["flashgate-ledger"].Data["REDIS_URL"], "//flashgate-redis:")
	assert.Contains(t, m.configMaps["flashgate-proxy"].Data["REDIS_URL"], "//flashgate-redis:")
	assert.Contains(t, m.configMaps["flashgate-proxy"].Data["LEDGER_URL"], "//flashgate-ledger:")
	checkSecretRefs(t, m)
}

// secretKeys are the keys of the Secret flashgate the deployments read, by
// service and env name; docs/operations.md's kubectl command creates each.
var secretKeys = map[string]map[string]string{
	"flashgate-ledger": {"LEDGER_TOKEN": "LEDGER_TOKEN", "LEDGER_TOKENS": "LEDGER_TOKENS", "DATABASE_URL": "DATABASE_URL"},
	"flashgate-proxy":  {"LEDGER_TOKEN": "PROXY_LEDGER_TOKEN", "PROXY_TOKENS": "PROXY_TOKENS"},
}

// checkSecretRefs checks the secrets: no Secret ships in the manifests (no
// placeholder token to forget), every token and DATABASE_URL comes from the
// Secret flashgate that the operator creates, required (a pod without it
// does not start), the proxy's edge is never opened (no PROXY_AUTH), and the
// kubectl command of docs/operations.md creates every key the deployments read, the
// proxy's ledger token scoped internal.
func checkSecretRefs(t *testing.T, m manifests) {
	t.Helper()
	assert.Empty(t, m.secrets, "the base ships no Secret: the operator creates flashgate")
	readme, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	for deploy, want := range secretKeys {
		d := m.deployments[deploy]
		require.NotNil(t, d, deploy)
		got := map[string]string{}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil {
				continue
			}
			assert.Equal(t, "flashgate", ref.Name, "%s %s", deploy, e.Name)
			assert.False(t, ref.Optional != nil && *ref.Optional, "%s %s: the secret is required", deploy, e.Name)
			got[e.Name] = ref.Key
			assert.Contains(t, string(readme), "--from-literal="+ref.Key+"=", "docs/operations.md creates the Secret's key %s", ref.Key)
		}
		assert.Equal(t, want, got, "%s's secrets", deploy)
		assert.NotContains(t, m.configMaps[deploy].Data, "PROXY_AUTH", "the edge requires a token")
	}
	assert.Contains(t, string(readme), `LEDGER_TOKENS="proxy:$PLT:internal`, "the proxies' ledger token is scoped internal")
	assert.Contains(t, string(readme), "@flashgate-postgres:", "DATABASE_URL names the ExternalName Service")
}

func checkService(t *testing.T, m manifests, service, addrVar string, settings map[string]string) {
	name := "flashgate-" + service
	d := m.deployments[name]
	require.NotNil(t, d, "Deployment %s", name)
	cm := m.configMaps[name]
	require.NotNil(t, cm, "ConfigMap %s", name)
	pod := d.Spec.Template
	assert.Equal(t, d.Spec.Selector.MatchLabels, pod.Labels, "the selector is the pod's labels")
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]

	// Every env name is a setting the service reads.
	for key := range cm.Data {
		assert.Contains(t, settings, key, "ConfigMap %s: %s is not a setting of the %s", name, key, service)
	}
	for _, e := range c.Env {
		assert.Contains(t, settings, e.Name, "%s env %s", name, e.Name)
		assert.NotNil(t, e.ValueFrom.SecretKeyRef, "%s %s: from the Secret (checkSecretRefs)", name, e.Name)
	}
	require.Len(t, c.EnvFrom, 1)
	assert.Equal(t, name, c.EnvFrom[0].ConfigMapRef.Name)

	// The port the service listens on, named http, and the probes on it;
	// with METRICS_ADDR, a second one named metrics, where Prometheus scrapes.
	_, port, _ := strings.Cut(cm.Data[addrVar], ":")
	scrape := port
	if _, metricsPort, ok := strings.Cut(cm.Data["METRICS_ADDR"], ":"); ok {
		require.Len(t, c.Ports, 2)
		assert.Equal(t, "metrics", c.Ports[1].Name)
		assert.Equal(t, metricsPort, strconv.Itoa(int(c.Ports[1].ContainerPort)), "%s serves /metrics on %s", service, cm.Data["METRICS_ADDR"])
		scrape = metricsPort
	} else {
		require.Len(t, c.Ports, 1)
	}
	assert.Equal(t, scrape, pod.Annotations["prometheus.io/port"], "Prometheus scrapes where /metrics is")
	assert.Equal(t, "http", c.Ports[0].Name)
	assert.Equal(t, port, strconv.Itoa(int(c.Ports[0].ContainerPort)), "%s listens on %s", service, cm.Data[addrVar])
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "http", c.LivenessProbe.HTTPGet.Port.String())

	// Stopping: the preStop pause is SHUTDOWN_DELAY, the grace covers it and the drain.
	delay := duration(t, cm.Data, settings, "SHUTDOWN_DELAY")
	timeout := duration(t, cm.Data, settings, "SHUTDOWN_TIMEOUT")
	require.NotNil(t, c.Lifecycle.PreStop.Exec, "a preStop pause")
	assert.Equal(t, []string{"sleep", strconv.Itoa(int(delay.Seconds()))}, c.Lifecycle.PreStop.Exec.Command)
	assert.GreaterOrEqual(t, time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second, delay+timeout,
		"terminationGracePeriodSeconds covers the preStop pause and SHUTDOWN_TIMEOUT")

	assert.False(t, c.Resources.Requests.Cpu().IsZero(), "a CPU request")
	assert.False(t, c.Resources.Requests.Memory().IsZero(), "a memory request")
	assert.False(t, c.Resources.Limits.Memory().IsZero(), "a memory limit")

	svc := m.services[name]
	if assert.NotNil(t, svc, "Service %s", name) {
		assert.Equal(t, pod.Labels, svc.Spec.Selector)
		require.Len(t, svc.Spec.Ports, 1)
		assert.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())
	}
	pdb := m.pdbs[name]
	if assert.NotNil(t, pdb, "PodDisruptionBudget %s", name) {
		assert.Equal(t, pod.Labels, pdb.Spec.Selector.MatchLabels)
	}
}

// duration reads a duration setting from the ConfigMap, or the service's default.
func duration(t *testing.T, data, defaults map[string]string, name string) time.Duration {
	t.Helper()
	v, ok := data[name]
	if !ok {
		v = defaults[name]
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, name)
	return d
}

// TestKubernetesOverlay checks the example overlay: it builds on the base,
// lists its patches, and each patch is a valid object of the base's.
func TestKubernetesOverlay(t *testing.T) {
	dir := "k8s/overlays/example"
	k := checkKustomization(t, dir)
	assert.Equal(t, []string{"../../base"}, k.Resources)
	base := decodeAll(t, "k8s/base/config.yaml", "k8s/base/external.yaml", "k8s/base/ledger.yaml", "k8s/base/proxy.yaml")
	var files []string
	for _, p := range k.Patches {
		files = append(files, filepath.Join(dir, p.Path))
	}
	patches := decodeAll(t, files...)
	for name := range patches.configMaps {
		assert.Contains(t, base.configMaps, name, "the overlay patches a ConfigMap the base has")
	}
	for name := range patches.services {
		assert.Contains(t, base.services, name)
	}
	for name := range patches.deployments {
		assert.Contains(t, base.deployments, name)
	}
	for name := range patches.hpas {
		assert.Contains(t, base.hpas, name)
	}
	settings := settingsOf(t, "ledger")
	for key := range patches.configMaps["flashgate-ledger"].Data {
		assert.Contains(t, settings, key)
	}
}
