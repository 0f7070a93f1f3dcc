package agent

import (
	"context"
	"testing"
)

// A pass plans from a snapshot; an operation of the volume that finishes
// before the plan is acted on makes the plan stale. Acting on it anyway
// ran the operation twice (in the bench, a second mount_device that then
// remounted), each time with an intent and its fsync.
func TestStalePlanIsNotActedOn(t *testing.T) {
	ctx := context.Background()
	f := &fakeTarget{}
	a := sessionAgent(t, f)
	desired := map[string]*Desired{"a": netVolume("a")}

	actual, versions := a.state.VersionedSnapshot()
	dec := Decide(desired, actual, Observations{})
	if len(dec.Ops) != 1 || dec.Ops[0].Kind != OpAttach {
		t.Fatalf("plan %+v, want one attach", dec.Ops)
	}
	// The attach of an earlier pass finishes after the snapshot.
	if err := a.opAttach(ctx, desired["a"]); err != nil {
		t.Fatal(err)
	}

	if started := a.act(ctx, dec, desired, actual, versions); started == 0 {
		t.Error("act reported nothing pending although the volume must be planned again (convergence would be claimed early)")
	}
	a.exec.Wait()
	if h := a.history.of("a"); len(h) != 0 {
		t.Errorf("the stale attach ran again: %+v", h)
	}
	select {
	case <-a.trigger:
	default:
		t.Error("no pass was asked for to plan the volume again")
	}

	// A fresh snapshot plans and acts normally.
	actual, versions = a.state.VersionedSnapshot()
	dec = Decide(desired, actual, Observations{})
	if len(dec.Ops) != 1 || dec.Ops[0].Kind != OpMountDevice {
		t.Fatalf("after the attach the plan is %+v, want mount_device", dec.Ops)
	}
}
