package agent

import "testing"

func TestSettledForReady(t *testing.T) {
	network := func(v string) bool { return v == "isc" || v == "nvm" }
	for _, c := range []struct {
		name      string
		converged bool
		ever      bool
		running   []string
		want      bool
	}{
		{"all done", true, false, nil, true},
		{"a local volume formats: not yet", false, false, []string{"data", "isc"}, false},
		// A login into a network that is not up yet must not hold up
		// READY=1, and with it every service of the boot.
		{"only network volumes attach: READY", false, false, []string{"isc", "nvm"}, true},
		{"after READY every operation counts", false, true, []string{"isc"}, false},
		{"after READY, converged", true, true, nil, true},
	} {
		if got := settledForReady(c.converged, c.ever, c.running, network); got != c.want {
			t.Errorf("%s: settledForReady(%v, %v, %v) = %v, want %v", c.name, c.converged, c.ever, c.running, got, c.want)
		}
	}
}
