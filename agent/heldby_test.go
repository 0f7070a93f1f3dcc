package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/volumed/volumed/store"
)

// oneDisk stands in for a disk selector that two volumes' expressions
// both select: every volume finds (or attaches) the same disk.
type oneDisk struct{ present bool }

func (o *oneDisk) found() Found {
	return Found{Device: "/dev/sdz", Identity: "device:serial:Z", Reusable: true, Note: "2 disks match; /dev/sdz is the first by path"}
}

func (o *oneDisk) Find(context.Context, *Desired) ([]Found, error) {
	if !o.present {
		return nil, nil
	}
	return []Found{o.found()}, nil
}

func (o *oneDisk) Attach(context.Context, *Desired) (Found, error) { return o.found(), nil }

func (o *oneDisk) Verify(context.Context, store.Attachment) (string, bool, error) {
	return "/dev/sdz", true, nil
}

func (o *oneDisk) Detach(context.Context, store.Attachment) error { return nil }

// Two volumes never record one disk: the first keeps it, the newcomer is
// refused, whether the disk was found in place or handed by Attach.
func TestDiskHeldByAnotherVolumeRefused(t *testing.T) {
	ctx := context.Background()
	for _, present := range []bool{true, false} {
		a := sessionAgent(t, nil)
		a.cfg.Attachers = map[string]Attacher{"fake": &oneDisk{present: present}}
		if err := a.opAttach(ctx, netVolume("first")); err != nil {
			t.Fatal(err)
		}
		if n := a.notes.get("first"); !strings.Contains(n, "first by path") {
			t.Errorf("present %v: note %q, want why the disk was chosen", present, n)
		}
		err := a.opAttach(ctx, netVolume("second"))
		if err == nil || !strings.Contains(err.Error(), "already volume first's") {
			t.Errorf("present %v: second volume's attach: %v, want refused", present, err)
		}
		if rec := a.state.Get("second"); rec != nil && rec.Attachment != nil {
			t.Errorf("present %v: second volume recorded %+v", present, rec.Attachment)
		}
		// The first volume attaching again (a retry) keeps its disk.
		if err := a.opAttach(ctx, netVolume("first")); err != nil {
			t.Errorf("present %v: first volume's retry: %v", present, err)
		}
	}
}

// At start-up a volume without a record never adopts what another
// volume's record holds (two expressions select one disk): the holder
// keeps it, and the newcomer is left to attach, and be refused.
func TestReconstructLeavesAnotherVolumesDisk(t *testing.T) {
	a := sessionAgent(t, nil)
	a.cfg.Attachers = map[string]Attacher{"fake": &oneDisk{present: true}}
	held := &store.Volume{Name: "whole", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/sdz", Identity: "device:serial:Z"}}
	if err := a.cfg.Store.Put(held); err != nil {
		t.Fatal(err)
	}
	a.manifests.replace(map[string]*Desired{"whole": netVolume("whole"), "twin": netVolume("twin")}, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := a.state.Get("twin"); rec != nil && rec.Attachment != nil {
		t.Errorf("twin adopted %+v, which whole holds", rec.Attachment)
	}
	if rec := a.state.Get("whole"); rec == nil || rec.Attachment == nil {
		t.Errorf("whole lost its disk: %+v", rec)
	}
}

// Without any record (a lost state file), two volumes whose selectors
// both pick one disk never both adopt it at start-up: the first to be
// reconstructed keeps it.
func TestReconstructAdoptsOneDiskOnce(t *testing.T) {
	a := sessionAgent(t, nil)
	a.cfg.Attachers = map[string]Attacher{"fake": &oneDisk{present: true}}
	a.manifests.replace(map[string]*Desired{"a": netVolume("a"), "b": netVolume("b")}, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
	}
	var holders []string
	for _, n := range []string{"a", "b"} {
		if rec := a.state.Get(n); rec != nil && rec.Attachment != nil {
			holders = append(holders, n)
		}
	}
	if len(holders) != 1 {
		t.Errorf("volumes holding the one disk after start-up: %v, want exactly one", holders)
	}
}

// coplanner records the others it is handed.
type coplanner struct {
	oneDisk
	others []string
}

func (c *coplanner) AttachAmong(_ context.Context, d *Desired, others []*Desired) (Found, error) {
	for _, o := range others {
		c.others = append(c.others, o.Name)
	}
	return Found{Device: "/dev/sdz1", Identity: "part:" + d.Name, Reusable: true}, nil
}

// A Coplanner's attach is handed the other wanted volumes of its driver,
// by name, and not volumes of other drivers or being torn down.
func TestCoplannerSeesItsSiblings(t *testing.T) {
	a := sessionAgent(t, nil)
	c := &coplanner{}
	a.cfg.Attachers = map[string]Attacher{"fake": c}
	gone := netVolume("gone")
	gone.Absent = true
	other := netVolume("other")
	other.Kind = "loop"
	a.manifests.replace(map[string]*Desired{"b": netVolume("b"), "a": netVolume("a"), "c": netVolume("c"), "gone": gone, "other": other}, nil)
	if err := a.opAttach(context.Background(), netVolume("b")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.others, ","); got != "a,c" {
		t.Errorf("others %q, want a,c", got)
	}
}
