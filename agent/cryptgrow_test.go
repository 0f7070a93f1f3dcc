package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// sizedFS has devices of the sizes in its map.
type sizedFS struct {
	fakeFS
	sizes map[string]int64
	grown []string
}

func (f *sizedFS) DeviceSize(dev string) (int64, error) {
	n, ok := f.sizes[dev]
	if !ok {
		return 0, fmt.Errorf("no device %s", dev)
	}
	return n, nil
}

func (f *sizedFS) Grow(_ context.Context, _, dev, _ string) error {
	f.grown = append(f.grown, dev)
	return nil
}

// An encrypted volume whose device grew: the growth check sees it through
// the mapping (the device less the LUKS2 header), and the grow resizes
// the mapping with a key before growing the filesystem on it.
func TestGrowEncrypted(t *testing.T) {
	const mi = 1 << 20
	ctx := context.Background()
	a, f := cryptAgent(t)
	sizes := map[string]int64{"/dev/fake-a": 64 * mi}
	fs := &sizedFS{sizes: sizes}
	a.cfg.FS, f.sizes = fs, sizes
	d := encrypted(netVolume("a"), "/etc/k")
	d.Spec.Filesystem.Grow = true
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	sizes["/dev/mapper/volumed-a"] = 64*mi - fakeHeaderBytes // what the open maps
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	if rec.Mapping.HeaderBytes != fakeHeaderBytes {
		t.Fatalf("header bytes %d, want %d", rec.Mapping.HeaderBytes, fakeHeaderBytes)
	}
	rec.Staging = &store.MountRecord{Path: a.stagingPath("a"), Device: rec.Mapping.Device, DeviceBytes: 48 * mi, Owned: true}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	now, err := a.observeSizes(context.Background(), d, rec)
	if err != nil || decide.GrowNeeded(d, rec, now) {
		t.Fatalf("as opened: sizes %+v (%v), grow needed %v; want none", now, err, decide.GrowNeeded(d, rec, now))
	}
	sizes["/dev/fake-a"] = 96 * mi // the LUN grew
	if now, err = a.observeSizes(context.Background(), d, rec); err != nil || now.Device != 80*mi || !decide.GrowNeeded(d, rec, now) {
		t.Fatalf("grown: sizes %+v (%v); want 80 MiB through the mapping, and a grow", now, err)
	}
	if err := a.opGrow(ctx, d); err != nil {
		t.Fatal(err)
	}
	if f.resizes != 1 || !slices.Equal(fs.grown, []string{"/dev/mapper/volumed-a"}) {
		t.Errorf("resizes %d, filesystems grown on %v; want one resize, then the filesystem on the mapping", f.resizes, fs.grown)
	}
	if got := a.state.Get("a").Staging.DeviceBytes; got != 80*mi {
		t.Errorf("fitted to %d, want 80 MiB", got)
	}
}
