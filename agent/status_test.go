package agent

import (
	"errors"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// A volume's phase, the one rule both Status and the STATUS= line use.
func TestVolumePhase(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		f    phaseFacts
		want string
	}{
		{"running", phaseFacts{busy: true, running: OpMountDevice, pending: true}, api.PhaseMounting},
		{"recovery key, a condition", phaseFacts{busy: true, running: OpRecoveryKey, degraded: true}, api.PhaseDegraded},
		{"converged", phaseFacts{wanted: true}, api.PhaseReady},
		{"converged, a condition", phaseFacts{wanted: true, degraded: true}, api.PhaseDegraded},
		{"a target held by another", phaseFacts{wanted: true, unmounted: "/srv/a", degraded: true}, api.PhasePending},
		{"pinned, not wanted", phaseFacts{pinned: true}, api.PhaseReady},
		{"gone", phaseFacts{}, api.PhaseAbsent},
		{"failed", phaseFacts{wanted: true, pending: true, failed: true, failure: Failure{Err: boom}, next: Op{Name: OpAttach}}, api.PhaseError},
		{"to attach", phaseFacts{wanted: true, pending: true, next: Op{Name: OpAttach}}, api.PhasePending},
		{"to mount", phaseFacts{wanted: true, pending: true, next: Op{Name: OpMountDevice}}, api.PhaseAttached},
		{"to open", phaseFacts{wanted: true, pending: true, next: Op{Name: OpOpen}}, api.PhaseAttached},
		{"to publish", phaseFacts{wanted: true, pending: true, next: Op{Name: OpPublish}}, api.PhaseMounting},
		{"to detach", phaseFacts{pending: true, next: Op{Name: OpDetach}}, api.PhaseDetaching},
	} {
		if got := volumePhase(c.f); got != c.want {
			t.Errorf("%s: phase %s, want %s", c.name, got, c.want)
		}
	}
}
