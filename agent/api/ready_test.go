package api

import (
	"slices"
	"testing"
)

func TestNotReadyAndMissing(t *testing.T) {
	st := &Status{Volumes: []Volume{
		{Name: "up", File: "/etc/volumed/volumes.d/up.yaml", Phase: PhaseReady},
		{Name: "worn", File: "/etc/volumed/volumes.d/worn.yaml", Phase: PhaseDegraded},
		{Name: "slow", File: "/etc/volumed/volumes.d/slow.yaml", Phase: PhasePending},
		{Name: "bad", File: "/etc/volumed/volumes.d/bad.yaml", Phase: PhaseError, LastError: "mkfs: exit 1", Retries: 3},
		{Name: "gone", Phase: PhaseReady}, // still set up, its manifest removed
	}}
	for _, tc := range []struct {
		names        []string
		why, missing []string
	}{
		{names: []string{"up", "worn"}},
		{names: []string{"up", "slow"}, why: []string{"slow: Pending"}},
		{names: []string{"bad"}, why: []string{"bad: Error (mkfs: exit 1; 3 retries)"}},
		{names: []string{"none", "up"}, why: []string{"none: no manifest defines it"}, missing: []string{"none"}},
		{names: []string{"gone"}, missing: []string{"gone"}},
	} {
		if got := NotReady(st, tc.names); !slices.Equal(got, tc.why) {
			t.Errorf("NotReady(%v) = %q, want %q", tc.names, got, tc.why)
		}
		if got := Missing(st, tc.names); !slices.Equal(got, tc.missing) {
			t.Errorf("Missing(%v) = %q, want %q", tc.names, got, tc.missing)
		}
	}
}
