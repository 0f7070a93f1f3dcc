package agent

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// madeWith is a converged volume whose mounts were made for d.
func madeWith(d *Desired) *store.Volume {
	v := have(d.Name, true, true)
	v.Attachment.Source = d.Caps.Key
	v.Staging.FSType = d.Spec.Filesystem.Type
	v.Staging.Options = decide.StagingOptions(d)
	for _, t := range d.Targets {
		v.Targets = append(v.Targets, targetRecord(0, t, decide.BindWords(decide.BindOptionsFor(d, t))))
	}
	return v
}

// loopWant is volume "a", a loop volume on /img/a.img, as the remount
// and pending-change rules see it.
func loopWant(targets ...DesiredTarget) *Desired {
	d := wantA(targets...)
	d.Caps = loopCaps("/img/a.img")
	return d
}

// loopCaps is what kinds/loop says of an image (the core sees no more).
func loopCaps(file string) manifest.Caps {
	return manifest.Caps{ImageFile: file, Key: "loop file " + file}
}

// remounter answers every remount with err.
type remounter struct {
	Mounter
	err   error
	calls int
}

func (r *remounter) Remount(string, int, []string, []string) error { r.calls++; return r.err }

// A remount the filesystem refuses is recorded, so that the next pass
// does not try it again and the volume shows what is pending; one that
// was only busy is retried.
func TestRefusedRemountIsRecorded(t *testing.T) {
	base := loopWant(DesiredTarget{Path: "/t"})
	journal := loopWant(DesiredTarget{Path: "/t"})
	journal.Spec.Filesystem = &manifest.Filesystem{Type: "ext4", MountOptions: []string{"data=journal"}}
	for _, c := range []struct {
		name        string
		err         error
		wantPlanned bool
	}{
		{"refused", fmt.Errorf("remount /s/a: %w", unix.EINVAL), false},
		{"busy", fmt.Errorf("remount /s/a: %w", unix.EBUSY), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := sessionAgent(t, &fakeTarget{})
			m := &remounter{err: c.err}
			a.cfg.Mounter = m
			if err := a.state.Adopt(madeWith(base)); err != nil {
				t.Fatal(err)
			}
			if err := a.opRemount(journal, DesiredTarget{}); !errors.Is(err, c.err) {
				t.Fatalf("opRemount = %v, want %v", err, c.err)
			}
			rec := a.state.Get("a")
			planned := len(decide.Plan(map[string]*Desired{"a": journal}, map[string]*store.Volume{"a": rec})) > 0
			if planned != c.wantPlanned {
				t.Errorf("remount planned again: %v, want %v", planned, c.wantPlanned)
			}
			if p := decide.PendingChanges(journal, rec); (len(p) == 1) == c.wantPlanned {
				t.Errorf("pending %+v", p)
			}
			if !slices.Equal(rec.Staging.Options, decide.StagingOptions(base)) {
				t.Errorf("recorded options %v after a failed remount, want the old ones", rec.Staging.Options)
			}
		})
	}
}
