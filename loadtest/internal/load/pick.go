package load

import (
	"fmt"
	"slices"
	"strings"
)

// Named is a scenario of one of the harness's commands (chaos, attack):
// its name, and whether it runs only when named.
type Named interface {
	ScenarioName() string
	OnlyByName() bool
}

// Names lists the names of all, in their order.
func Names[T Named](all []T) []string {
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.ScenarioName()
	}
	return names
}

// Pick returns the scenarios of all named by names (a repeated --scenario),
// in the order given; none named, or "all": every one that does not run only
// by name. An unknown name is an error that lists the known ones.
func Pick[T Named](all []T, names []string) ([]T, error) {
	if len(names) == 0 || slices.Contains(names, "all") {
		return slices.DeleteFunc(slices.Clone(all), func(s T) bool { return s.OnlyByName() }), nil
	}
	var chosen []T
	for _, name := range names {
		i := slices.IndexFunc(all, func(s T) bool { return s.ScenarioName() == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (have %s, or all)", name, strings.Join(Names(all), ", "))
		}
		chosen = append(chosen, all[i])
	}
	return chosen, nil
}
