// Package ops holds flashgate's deployment files: Prometheus alerts, a Grafana
// dashboard, and Kubernetes manifests (k8s/base, a kustomize base, and
// k8s/overlays/example). It has no code: its tests validate those files and
// ../docker-compose.yml offline, against the Kubernetes API types, compose-go
// and the services' own settings.
package ops
