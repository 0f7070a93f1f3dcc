package agent

import (
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// wantA is what a manifest asks of volume "a", an ext4 loop volume.
func wantA(targets ...DesiredTarget) *Desired {
	return &Desired{Name: "a", Kind: "loop", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}, Targets: targets}
}

func have(name string, attached, staged bool, targets ...store.MountRecord) *store.Volume {
	v := &store.Volume{Name: name, Kind: "loop", Targets: targets}
	if attached {
		v.Attachment = &store.Attachment{Kind: "loop", Device: "/dev/loop1", Identity: "loop:/i@1:2", Owned: true}
	}
	if staged {
		v.Staging = &store.MountRecord{Path: "/s/" + name, Owned: true, Options: []string{"nosuid", "nodev"}}
	}
	return v
}

func pub(p string, ro bool) store.MountRecord {
	return store.MountRecord{Path: p, ReadOnly: ro, Owned: true, Options: decide.BindWords(BindOptions{ReadOnly: ro, NoSuid: true, NoDev: true})}
}

// A publish planned from a snapshot older than the publish that already
// recorded the target is a no-op: the record keeps one entry per path
// (a twin made a later pass see a stale copy and act on it forever).
func TestPublishOfRecordedTargetIsNoOp(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	if err := a.state.Adopt(have("a", true, true, pub("/t", false))); err != nil {
		t.Fatal(err)
	}
	// a.cfg.Mounter is nil: any mount call would panic.
	if err := a.opPublish(wantA(DesiredTarget{Path: "/t"}), DesiredTarget{Path: "/t"}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.state.Get("a").Targets); n != 1 {
		t.Errorf("%d target records for one path, want 1", n)
	}
}
