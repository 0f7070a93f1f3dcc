package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/store"
)

// dataNoSignature is a device with data and no signature: random bytes
// from offset 0, as plain dm-crypt or a raw database leaves.
type dataNoSignature struct {
	fakeFS
	mkfss   int
	ownSeen []bool
}

func (f *dataNoSignature) Examine(_ context.Context, dev string, own bool) (blank.Facts, error) {
	f.ownSeen = append(f.ownSeen, own)
	return blank.Facts{Device: dev, Created: own, Zeros: blank.Zeros{Read: true, FirstNonZero: 0, Bytes: 1 << 20, Regions: 1}}, nil
}

func (f *dataNoSignature) Mkfs(context.Context, string, string, string, []string) error {
	f.mkfss++
	return errors.New("stop here")
}

// Unknown data is never formatted: the volume keeps a NotBlank condition
// (UnknownData, at offset 0). A format of its own that a crash
// interrupted is the one exception: its partial writes are volumed's.
func TestUnknownDataIsNotFormatted(t *testing.T) {
	ctx := context.Background()
	fs := &dataNoSignature{}
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.FS = fs
	a.cfg.Mounter = refusingMounter{}
	if err := a.state.Adopt(have("a", true, false)); err != nil {
		t.Fatal(err)
	}
	d := wantA()
	err := a.opMountDevice(ctx, d)
	if err == nil || !strings.Contains(err.Error(), "offset 0") || fs.mkfss != 0 {
		t.Fatalf("opMountDevice = %v after %d mkfs; want a refusal naming offset 0 and no mkfs", err, fs.mkfss)
	}
	if cs := a.conds.Of("a"); len(cs) != 1 || cs[0].Type != CondNotBlank || cs[0].Reason != blank.ReasonUnknownData {
		t.Errorf("conditions %+v; want NotBlank/UnknownData", cs)
	}

	a.formats.interrupted.set("a", "0b1e1a6e-0000-4000-8000-000000000001")
	_ = a.opMountDevice(ctx, d)
	if fs.mkfss != 1 || !fs.ownSeen[len(fs.ownSeen)-1] {
		t.Errorf("an interrupted format of its own: %d mkfs, own %v; want it redone", fs.mkfss, fs.ownSeen)
	}
}

// A LUKS2 header volumed wrote opens a mapping that decrypts the zeros
// the blank rule passed into noise: the mapping is blank by the record
// of that header, so the filesystem is made (the VM's cryptvol and
// crypttpm scenarios stood in UnknownData at offset 0 of the mapping).
func TestFreshMappingIsFormatted(t *testing.T) {
	ctx := context.Background()
	a, _, fs, d := openedFreshMapping(t)
	_ = a.opMountDevice(ctx, d)
	if fs.mkfss != 1 || !fs.ownSeen[len(fs.ownSeen)-1] {
		t.Errorf("the fresh mapping of a header volumed wrote: %d mkfs, own %v; want it formatted", fs.mkfss, fs.ownSeen)
	}
}

// openedFreshMapping: volume "a", encrypted, attached and opened on a
// blank device: volumed wrote its LUKS2 header, its mapping reads as noise.
func openedFreshMapping(t *testing.T) (*Agent, *fakeDMCrypt, *noisyMapping, *Desired) {
	t.Helper()
	ctx := context.Background()
	a, dm := cryptAgent(t)
	fs := &noisyMapping{}
	a.cfg.FS = fs
	a.cfg.Mounter = refusingMounter{}
	d := encrypted(netVolume("a"), "/etc/k1")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	return a, dm, fs, d
}

// noisyMapping: raw devices read as zeros, dm-crypt mappings as noise.
type noisyMapping struct{ dataNoSignature }

func (f *noisyMapping) Examine(ctx context.Context, dev string, own bool) (blank.Facts, error) {
	if !strings.HasPrefix(dev, "/dev/mapper/") {
		return blank.Facts{Device: dev, Created: own, Zeros: blank.Zeros{Read: true, FirstNonZero: -1, Bytes: 1 << 20, Regions: 1}}, nil
	}
	return f.dataNoSignature.Examine(ctx, dev, own)
}

// The same after a reboot between the header and the filesystem: the
// next boot attaches the image again (found, not created) and opens the
// header volumed wrote; its mapping is still blank by record. A power
// cut there left TestPowerCut's vault NotBlank/UnknownData for good.
func TestFreshMappingIsFormattedAfterReboot(t *testing.T) {
	ctx := context.Background()
	a, dm, fs, d := openedFreshMapping(t)
	// The reboot: no mapping, the device attached anew.
	dm.mu.Lock()
	clear(dm.open)
	dm.mu.Unlock()
	if err := a.state.Do("a", d.Kind, "reboot", nil, func(rec *store.Volume) error {
		rec.Mapping = nil
		rec.Attachment.Created = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	_ = a.opMountDevice(ctx, d)
	if dm.formats != 1 || fs.mkfss != 1 || !fs.ownSeen[len(fs.ownSeen)-1] {
		t.Errorf("after a reboot: %d luksFormat, %d mkfs, own %v; want the header kept and its mapping formatted", dm.formats, fs.mkfss, fs.ownSeen)
	}
	if cs := a.conds.Of("a"); len(cs) != 0 {
		t.Errorf("conditions %+v; want none", cs)
	}
}

// cutAfterHeader writes the header and then loses power: the encrypt's
// outcome is never recorded.
type cutAfterHeader struct{ *fakeDMCrypt }

func (c cutAfterHeader) Format(ctx context.Context, o CryptFormat) error {
	if err := c.fakeDMCrypt.Format(ctx, o); err != nil {
		return err
	}
	return errors.New("power cut")
}

// The header's UUID is the volume's before the header is written: a cut
// right after the header leaves the identity that makes its mapping
// blank by record (recorded after the header, it was lost with the cut).
func TestHeaderIdentityRecordedBeforeTheHeader(t *testing.T) {
	ctx := context.Background()
	a, dm := cryptAgent(t)
	a.cfg.Crypt = cutAfterHeader{dm}
	d := encrypted(netVolume("a"), "/etc/k1")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err == nil {
		t.Fatal("opOpen succeeded through a power cut")
	}
	hdr := dm.headers["/dev/fake-a"]
	if id := a.idents.get("a"); id == nil || id.LUKS != hdr.uuid || id.How != decide.HowFormatted {
		t.Errorf("after a cut right after the header (UUID %q): identity %+v; want the header's UUID, formatted", hdr.uuid, id)
	}
}
