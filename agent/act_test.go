package agent

import (
	"context"
	"testing"

	"github.com/volumed/volumed/store"
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

// Unpublish and unmount_device write no intent before they touch the
// kernel: what they remove is named by paths that are ours alone (a bind
// of our staging mount, staging/<volume>), so reconstruction reads their
// outcome in the kernel whenever a crash comes (the crash-point matrix of
// test/e2e, after-kernel and after a reboot). Their records still reach
// the disk, with the detach's intent.
func TestMountTeardownWritesNoIntent(t *testing.T) {
	ctx := context.Background()
	a := sessionAgent(t, &fakeTarget{})
	st := a.cfg.Store.(*store.Store)
	m := &fakeMounter{mounted: map[string]bool{}}
	a.cfg.Mounter = m
	if err := a.opAttach(ctx, netVolume("a")); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	staging := a.stagingPath("a")
	rec.Staging = &store.MountRecord{Path: staging, MountID: 7, Owned: true}
	rec.Targets = []store.MountRecord{{Path: "/srv/a", MountID: 7, Owned: true}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	m.mounted[staging], m.mounted["/srv/a"] = true, true
	m.onUnmount = func(p string) {
		if _, intents, err := st.Load(); err != nil || len(intents) != 0 {
			t.Errorf("unmounting %s with intents %+v on disk (%v); want none", p, intents, err)
		}
	}
	if err := a.opUnpublish(ctx, "a", "fake", "/srv/a"); err != nil {
		t.Fatal(err)
	}
	if err := a.opUnmountDevice(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	if len(m.mounted) != 0 {
		t.Fatalf("still mounted: %v", m.mounted)
	}
	if err := a.opDetach(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	// The detach's intent commit carried the outcomes before it (its own
	// outcome may have followed by now).
	vols, intents, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range intents {
		if in.Op != OpDetach {
			t.Errorf("intent %+v on disk; want the detach's at most", in)
		}
	}
	if v := vols["a"]; v != nil && (v.Staging != nil || len(v.Targets) != 0) {
		t.Errorf("record on disk after the teardown: %+v; want no staging, no targets", v)
	}
}
