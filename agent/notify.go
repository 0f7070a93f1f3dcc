// What systemd is told: READY=1, STATUS= and the usage cache refreshed when things settle.

package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

const statusEvery = 250 * time.Millisecond

func (a *Agent) notify(state string) {
	if a.cfg.Notify != nil {
		a.cfg.Notify(state)
	}
}

// reportStatus tells systemd how things stand, READY=1 the first time the
// agent has settled (everything converged or waiting out a backoff).
func (a *Agent) reportStatus(firstSettle bool) {
	counts := map[string]int{}
	for _, v := range a.Status() {
		counts[v.Phase]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToLower(k)))
	}
	line := "no volumes"
	if len(parts) > 0 {
		line = strings.Join(parts, ", ")
	}
	a.mu.Lock()
	changed := line != a.statusLine
	a.statusLine = line
	a.mu.Unlock()
	if firstSettle {
		a.cfg.Log.Info("converged", "status", line)
		a.notify("READY=1\nSTATUS=" + line)
		return
	}
	if changed {
		a.notify("STATUS=" + line)
	}
}

func (a *Agent) refreshUsage() {
	paths := map[string]string{}
	for name, rec := range a.state.Snapshot() {
		if rec.Staging != nil {
			paths[name] = rec.Staging.Path
		}
	}
	a.usage.refresh(paths)
}
