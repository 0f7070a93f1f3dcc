package api

import (
	"fmt"
	"slices"
)

// Missing is the names no manifest defines (yet) in st.
func Missing(st *Status, names []string) []string {
	var missing []string
	for _, n := range names {
		i := slices.IndexFunc(st.Volumes, func(v Volume) bool { return v.Name == n })
		if i < 0 || st.Volumes[i].File == "" {
			missing = append(missing, n)
		}
	}
	return missing
}

// Usable is whether a service may use a volume in phase: the one rule of
// "ready" for `volumed wait`, the agent's GET /v1/wait and its ready
// marks (volumed-wait@.service). Degraded is in place and usable; what
// is wrong is in `volumed status NAME` and the metrics.
func Usable(phase string) bool { return phase == PhaseReady || phase == PhaseDegraded }

// NotReady says, for each named volume a service could not use yet, why;
// nil when all of them are usable. The one rule of "ready" for `volumed
// wait` and the agent's GET /v1/wait.
func NotReady(st *Status, names []string) []string {
	var why []string
	for _, n := range names {
		i := slices.IndexFunc(st.Volumes, func(v Volume) bool { return v.Name == n })
		if i < 0 {
			why = append(why, fmt.Sprintf("%s: no manifest defines it", n))
			continue
		}
		v := st.Volumes[i]
		if Usable(v.Phase) {
			continue
		}
		msg := fmt.Sprintf("%s: %s", n, v.Phase)
		if v.LastError != "" {
			msg += fmt.Sprintf(" (%s; %d retries)", v.LastError, v.Retries)
		}
		why = append(why, msg)
	}
	return why
}
