package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	var recs []*store.Volume
	for name, id := range map[string]string{"in-place": "id-in-place", "moved": "id-moved", "gone": "id-gone"} {
		rec := &store.Volume{Name: name, Kind: "fake",
			Attachment: &store.Attachment{Kind: "fake", Device: "/dev/loop2", Identity: id, Owned: true}}
		if name == "in-place" {
			rec.Attachment.Device = "/dev/loop1"
		}
		recs = append(recs, rec)
	}
	restartWith(t, a, recs)
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

// restartWith stores recs, wants each of their volumes and starts.
func restartWith(t *testing.T, a *Agent, recs []*store.Volume) {
	t.Helper()
	desired := map[string]*Desired{}
	for _, rec := range recs {
		if err := a.cfg.Store.Put(rec); err != nil {
			t.Fatal(err)
		}
		desired[rec.Name] = netVolume(rec.Name)
	}
	a.manifests.replace(desired, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
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

// leftoverTarget lists leftovers (LeftoverLister) and records the
// volumes it was told are wanted.
type leftoverTarget struct {
	listingTarget
	leftovers []string
	wanted    []string
	removed   int
}

func (l *leftoverTarget) ListLeftovers(_ context.Context, wanted []*Desired) ([]string, error) {
	for _, d := range wanted {
		l.wanted = append(l.wanted, d.Name)
	}
	return l.leftovers, nil
}

func (l *leftoverTarget) Detach(context.Context, store.Attachment) error { l.removed++; return nil }

// A start logs what a driver made that no manifest names any more (an
// inactive LV, a VG of volumed's), given the wanted volumes to tell them
// by, and touches none of it.
func TestStartLogsLeftovers(t *testing.T) {
	a := sessionAgent(t, nil)
	var logs bytes.Buffer
	a.cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	l := &leftoverTarget{leftovers: []string{"inactive LV vg0/old tagged volumed:old", "volume group vgold tagged volumed:vgold"}}
	a.cfg.Attachers = map[string]Attacher{"fake": l}
	a.manifests.replace(map[string]*Desired{"kept": netVolume("kept")}, nil)
	if err := a.reconstruct(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.wanted, []string{"kept"}) {
		t.Errorf("the lister was given %v as wanted, want [kept]", l.wanted)
	}
	for _, what := range l.leftovers {
		if !strings.Contains(logs.String(), what) {
			t.Errorf("the start's log does not say %q:\n%s", what, logs.String())
		}
	}
	if l.removed != 0 {
		t.Errorf("%d leftovers detached, want none", l.removed)
	}
}
