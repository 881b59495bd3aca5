package api

// Health is the answer of GET HealthzPath: the process is up. (Fields in
// the order the map it replaced wrote them.)
type Health struct {
	// PID is the answering process's id, so that a starter can tell its own
	// process from another one holding the port.
	PID    int    `json:"pid"`
	Status string `json:"status"` // "ok"
}

// Ready is the 200 answer of GET ReadyzPath.
type Ready struct {
	Status string `json:"status"` // "ready"
}
