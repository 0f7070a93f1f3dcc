package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/blank"
)

// halfMkfs is a device whose mkfs fails after writing a superblock.
type halfMkfs struct {
	sigs          []Signature
	probes, mkfss int
}

func (f *halfMkfs) Probe(context.Context, string) ([]Signature, error) {
	f.probes++
	return f.sigs, nil
}

func (f *halfMkfs) Inspect(context.Context, string) (FSInfo, error) { return FSInfo{}, nil }
func (f *halfMkfs) CheckReadOnly(context.Context, string, string) (FSCheck, error) {
	return FSCheckUnknown, nil
}
func (f *halfMkfs) Mkfs(context.Context, string, string, string, []string) error {
	f.mkfss++
	f.sigs = []Signature{{Type: "ext4", Usage: "filesystem", Offset: 1080}}
	return errors.New("mkfs.ext4 /dev/loop1: exit status 1: Could not allocate block group descriptors")
}

func (f *halfMkfs) Examine(_ context.Context, dev string, _ bool) (blank.Facts, error) {
	return blank.Facts{Device: dev, Zeros: blank.Zeros{Read: true, FirstNonZero: -1}}, nil
}
func (f *halfMkfs) Grow(context.Context, string, string, string) error { return nil }
func (f *halfMkfs) DeviceSize(string) (int64, error)                   { return 1 << 20, nil }

// A mkfs that fails and leaves a signature: the error says what is on
// the device and what to do; the volume is not tried again (no second
// mkfs, no probe, no wipe) until its manifest changes.
func TestFailedMkfsIsNotRetried(t *testing.T) {
	ctx := context.Background()
	fs := &halfMkfs{}
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.FS = fs
	a.cfg.Mounter = refusingMounter{}
	if err := a.state.Adopt(have("a", true, false)); err != nil {
		t.Fatal(err)
	}
	d := wantA()
	d.Generation = "g1"

	err := a.opMountDevice(ctx, d)
	for _, w := range []string{"Could not allocate", "it left signatures on /dev/loop1: ext4 (filesystem, at byte 1080)", "volumed wipe --volume a --yes", "will not try again until the manifest changes"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not say %q", err, w)
		}
	}
	if !a.conds.Has("a", CondFormatRefused) {
		t.Error("no FormatRefused condition")
	}
	a.exec.finish("a", OpMountDevice, err)
	if ok, _ := a.exec.Start(ctx, "a", OpMountDevice, func(context.Context) error { return nil }, nil); ok {
		t.Error("the executor would retry a refused format")
	}

	probes := fs.probes
	if err2 := a.opMountDevice(ctx, d); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second try: %v, want the same refusal", err2)
	}
	if fs.mkfss != 1 || fs.probes != probes {
		t.Errorf("second try touched the device: %d mkfs, %d probes (was %d)", fs.mkfss, fs.probes, probes)
	}

	d2 := wantA()
	d2.Generation = "g2"
	_ = a.opMountDevice(ctx, d2)
	if a.conds.Has("a", CondFormatRefused) {
		t.Error("FormatRefused stays after the manifest changed")
	}
	if fs.mkfss != 1 {
		t.Errorf("%d mkfs runs: a device that is no longer blank was formatted", fs.mkfss)
	}
}

// refusingMounter mounts nothing: the half-made filesystem does not mount.
type refusingMounter struct{ Mounter }

func (refusingMounter) At(string) (MountPoint, error)                { return MountPoint{}, errors.New("not mounted") }
func (refusingMounter) EnsureDir(string) error                       { return nil }
func (refusingMounter) BindDevice(string, string, BindOptions) error { return nil }
func (refusingMounter) MountDevice(string, string, string, []string) error {
	return errors.New("wrong fs type, bad option, bad superblock")
}
