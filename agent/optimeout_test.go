package agent

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestTimedOut(t *testing.T) {
	killed := errors.New("mkfs.ext4: signal: killed")
	tests := []struct {
		name                  string
		parentErr, opErr, err error
		wantWrapped, wantSame bool
	}{
		{name: "succeeded", opErr: context.DeadlineExceeded, err: nil, wantSame: true},
		{name: "its own bound ended it", opErr: context.DeadlineExceeded, err: killed, wantWrapped: true},
		{name: "failed in time", opErr: nil, err: killed, wantSame: true},
		{name: "the agent is stopping", parentErr: context.Canceled, opErr: context.Canceled, err: killed, wantSame: true},
		{name: "the agent's own deadline", parentErr: context.DeadlineExceeded, opErr: context.DeadlineExceeded, err: killed, wantSame: true},
	}
	for _, tc := range tests {
		got := timedOut(OpFormat, 30*time.Second, tc.parentErr, tc.opErr, tc.err)
		if tc.wantSame && got != tc.err {
			t.Errorf("%s: %v, want the error unchanged (%v)", tc.name, got, tc.err)
		}
		if tc.wantWrapped {
			if got == nil || !errors.Is(got, killed) || !strings.Contains(got.Error(), "format timed out after 30s") {
				t.Errorf("%s: %v, want a reason naming the operation and its bound, wrapping the helper's error", tc.name, got)
			}
		}
	}
}

// An operation whose helper does not return is stopped at the bound: the
// helper is killed, the operation fails saying it timed out, and the
// volume is free for its retry.
func TestExecutorBoundsAnOperation(t *testing.T) {
	e := NewExecutor(2, time.Now)
	e.timeout = 200 * time.Millisecond
	done := make(chan error, 1)
	slow := func(ctx context.Context) error {
		// A helper stuck on a slow disk, as a process the bound can kill.
		return exec.CommandContext(ctx, "sleep", "60").Run()
	}
	start := time.Now()
	if ok, _ := e.Start(context.Background(), "v", OpFormat, slow, func(err error) { done <- err }); !ok {
		t.Fatal("the operation did not start")
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the operation outlived its bound by 30 s")
	}
	if err == nil || !strings.Contains(err.Error(), "format timed out after 200ms") {
		t.Fatalf("the bounded operation ended with %v, want a timeout naming the operation and its bound", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the helper ran %s past a bound of 200ms", took)
	}
	if _, running := e.Running("v"); running {
		t.Error("the volume still shows its operation running after the timeout")
	}
}
