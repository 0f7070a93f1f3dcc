package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/volumed/volumed/store"
)

// listingTarget lists what carries our marker, and records which
// attachments it was asked to Verify; Verify finds only what it lists.
type listingTarget struct {
	oneDisk
	owned    []store.Attachment
	verified []string
}

func (l *listingTarget) ListOwned(context.Context) ([]store.Attachment, error) { return l.owned, nil }

func (l *listingTarget) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	l.verified = append(l.verified, at.Identity)
	for _, o := range l.owned {
		if o.Identity == at.Identity {
			return o.Device, true, nil
		}
	}
	return "", false, nil
}

// A restart reads what is ours in the kernel once (ListOwned), and a
// recorded attachment that list shows, on the same device, is not
// verified again one by one: those sysfs reads were most of a restart
// with everything in place (docs/performance.md). What the list does
// not show as recorded is still verified.
func TestRestartVerifiesFromTheOwnedList(t *testing.T) {
	a := sessionAgent(t, nil)
	l := &listingTarget{owned: []store.Attachment{
		{Kind: "fake", Device: "/dev/loop1", Identity: "id-in-place", Owned: true},
		{Kind: "fake", Device: "/dev/loop7", Identity: "id-moved", Owned: true},
	}}
	a.cfg.Attachers = map[string]Attacher{"fake": l}
	recs := map[string]string{"in-place": "id-in-place", "moved": "id-moved", "gone": "id-gone"}
	desired := map[string]*Desired{}
	for name, id := range recs {
		rec := &store.Volume{Name: name, Kind: "fake",
			Attachment: &store.Attachment{Kind: "fake", Device: "/dev/loop2", Identity: id, Owned: true}}
		if name == "in-place" {
			rec.Attachment.Device = "/dev/loop1"
		}
		if err := a.cfg.Store.Put(rec); err != nil {
			t.Fatal(err)
		}
		desired[name] = netVolume(name)
	}
	a.manifests.replace(desired, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
	}
	slices.Sort(l.verified)
	if want := []string{"id-gone", "id-moved"}; !slices.Equal(l.verified, want) {
		t.Errorf("verified %v one by one, want %v (the listed one in place is seen in the list)", l.verified, want)
	}
	for name, dev := range map[string]string{"in-place": "/dev/loop1", "moved": "/dev/loop7"} {
		if rec := a.state.Get(name); rec == nil || rec.Attachment == nil || rec.Attachment.Device != dev {
			t.Errorf("%s after the restart: %+v, want attached at %s", name, rec, dev)
		}
	}
	if rec := a.state.Get("gone"); rec != nil && rec.Attachment != nil {
		t.Errorf("gone kept its attachment %+v, which the kernel no longer shows", rec.Attachment)
	}
}

// A teardown leaves its empty staging dir (an rmdir there waited on the
// state filesystem's journal with the slot held); the next start removes
// the dirs of volumes it neither wants nor records, and nothing else.
func TestStartSweepsStagingDirsOfGoneVolumes(t *testing.T) {
	a := sessionAgent(t, nil)
	a.cfg.Attachers = map[string]Attacher{"fake": &listingTarget{}}
	staging := filepath.Join(a.cfg.StateDir, "staging")
	for _, n := range []string{"gone", "wanted", "not-empty"} {
		if err := os.MkdirAll(filepath.Join(staging, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, "not-empty", "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.manifests.replace(map[string]*Desired{"wanted": netVolume("wanted")}, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]bool{"gone": false, "wanted": true, "not-empty": true} {
		_, err := os.Stat(filepath.Join(staging, n))
		if got := err == nil; got != want {
			t.Errorf("staging/%s there after the start: %v, want %v", n, got, want)
		}
	}
}
