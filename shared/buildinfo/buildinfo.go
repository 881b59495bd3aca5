// Package buildinfo says which build of flashgate is running: the version the
// Makefile stamps in with -ldflags and the VCS revision Go records.
package buildinfo

import "runtime/debug"

// version is set by the Makefile's build:
// -ldflags "-X github.com/flashgate/flashgate/shared/buildinfo.version=v1.2.3".
// A plain `go build` or `go test` leaves "dev".
var version = "dev"

// revision may be stamped the same way when the build has no VCS information
// (GOFLAGS=-buildvcs=false, a copy of the tree without .git).
var revision = ""

// Version returns the stamped version, or "dev".
func Version() string { return version }

// Revision returns the VCS revision Go recorded (vcs.revision, with "-dirty"
// when vcs.modified), else the stamped one, else "unknown".
func Revision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	if revision != "" {
		return revision
	}
	return "unknown"
}
