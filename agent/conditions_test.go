package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

func TestActivationProblem(t *testing.T) {
	refused := &NotActivated{Reason: "PhysicalVolumeMissing", Err: errors.New("activate LV vg0/m: lvm lvchange: Refusing activation of partial LV vg0/m.")}
	for _, c := range []struct {
		name   string
		err    error
		known  bool
		reason string // "" for no problem
		says   string
	}{
		{"attached: cleared", nil, true, "", ""},
		{"would not activate: raised", refused, true, "PhysicalVolumeMissing", "the source of volume v would not activate: activate LV vg0/m: lvm lvchange: Refusing activation of partial LV vg0/m."},
		{"wrapped on the way: raised", fmt.Errorf("attach v: %w", fmt.Errorf("volume v: %w", refused)), true, "PhysicalVolumeMissing", "Refusing activation"},
		{"another failure: unknown, kept", errors.New("list volume groups: lvm vgs: exit status 5"), false, "", ""},
	} {
		p, known := activationProblem("v", c.err)
		switch {
		case known != c.known:
			t.Errorf("%s: known = %v, want %v", c.name, known, c.known)
		case c.reason == "" && p != nil:
			t.Errorf("%s: %+v, want no problem", c.name, p)
		case c.reason != "" && (p == nil || p.Reason != c.reason || !strings.Contains(p.Message, c.says)):
			t.Errorf("%s: %+v, want reason %s saying %q", c.name, p, c.reason, c.says)
		}
	}
}

// activating is a fakeTarget whose Attach fails with err while it is set.
type activating struct {
	*fakeTarget
	err error
}

func (f *activating) Attach(ctx context.Context, d *Desired) (Found, error) {
	if f.err != nil {
		return Found{}, f.err
	}
	return f.fakeTarget.Attach(ctx, d)
}

// A source that would not activate gives the volume ActivationFailed
// with what its tool said (not Ready); another failure of a later attach
// keeps it; an attach that succeeds clears it.
func TestActivationFailedCondition(t *testing.T) {
	st, _, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ft := &activating{fakeTarget: &fakeTarget{}, err: fmt.Errorf("volume m: %w", &NotActivated{Reason: "PhysicalVolumeMissing",
		Err: errors.New("activate LV vg0/m: lvm lvchange: Refusing activation of partial LV vg0/m.")})}
	a := New(Config{StateDir: t.TempDir(), Store: st, Attachers: map[string]Attacher{"fake": ft}, Mounter: &fakeMounter{}})
	a.state = NewState(st, time.Now, nil)
	close(a.startedc)
	d := &Desired{Name: "m", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}}
	a.manifests.replace(map[string]*Desired{"m": d}, nil)
	ctx := context.Background()

	if err := a.opAttach(ctx, d); err == nil {
		t.Fatal("attach of a source that would not activate succeeded")
	}
	v := statusOf(t, a, "m")
	c, ok := condition(v, CondActivationFailed)
	if !ok || c.Reason != "PhysicalVolumeMissing" || !strings.Contains(c.Message, "Refusing activation of partial LV vg0/m") || v.Phase == "Ready" {
		t.Fatalf("status after the refused activation: %+v; want ActivationFailed PhysicalVolumeMissing with lvm2's words, not Ready", v)
	}
	ft.err = errors.New("list volume groups: lvm vgs: exit status 5")
	if err := a.opAttach(ctx, d); err == nil {
		t.Fatal("attach with a failed vgs succeeded")
	}
	if _, ok := condition(statusOf(t, a, "m"), CondActivationFailed); !ok {
		t.Error("a failure that says nothing of activation cleared ActivationFailed: want it kept")
	}
	ft.err = nil
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, ok := condition(statusOf(t, a, "m"), CondActivationFailed); ok {
		t.Error("ActivationFailed kept after the attach succeeded")
	}
}
