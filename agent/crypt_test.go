package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// fakeDMCrypt stands in for dm-crypt and cryptsetup, which this
// machine's kernel lacks (the real ones run in test/vm's cryptvol
// scenario): devices hold a LUKS2 header or not, and a header opens with
// the key files it enrolled.
type fakeDMCrypt struct {
	mu      sync.Mutex
	headers map[string]fakeHeader // device -> header
	open    map[string]string     // mapping name -> device
	formats int
	opens   int // mappings made (not adopted)
	resizes int
	// sizes, when set, are the devices' sizes (shared with a sizedFS).
	sizes map[string]int64
}

const fakeHeaderBytes = 16 << 20

type fakeHeader struct {
	uuid string
	keys []string // key files enrolled
	torn bool     // a luksFormat cut short
}

func newFakeDMCrypt() *fakeDMCrypt {
	return &fakeDMCrypt{headers: map[string]fakeHeader{}, open: map[string]string{}}
}

func (f *fakeDMCrypt) Inspect(dev, intentUUID string) (LUKSHeader, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.headers[dev]
	return LUKSHeader{Found: ok, Whole: ok && !h.torn, UUID: h.uuid, HalfWritten: h.torn && h.uuid == intentUUID}, nil
}

func (f *fakeDMCrypt) Format(_ context.Context, o CryptFormat) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.headers[o.Device]; ok && h.uuid != o.UUID {
		return fmt.Errorf("not blank")
	}
	var keys []string
	for _, k := range o.Keys {
		keys = append(keys, k.File)
	}
	f.headers[o.Device] = fakeHeader{uuid: o.UUID, keys: keys}
	f.formats++
	return nil
}

func (f *fakeDMCrypt) Open(_ context.Context, o CryptOpen) (CryptOpened, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.headers[o.Device]
	if !ok {
		return CryptOpened{}, errors.New("no LUKS2 header")
	}
	if dev, ok := f.open[o.Name]; ok && dev == o.Device {
		return CryptOpened{Device: "/dev/mapper/" + o.Name, UUID: h.uuid, Adopted: true}, nil
	}
	var why []string
	for i, k := range o.Keys {
		for _, e := range h.keys {
			if e == k.File {
				f.open[o.Name] = o.Device
				f.opens++
				return CryptOpened{Device: "/dev/mapper/" + o.Name, UUID: h.uuid, KeyKind: k.Kind()}, nil
			}
		}
		why = append(why, fmt.Sprintf("key %d (file %s): does not match any keyslot", i, k.File))
	}
	return CryptOpened{}, fmt.Errorf("%s: no key opens its LUKS2 header; %s: %w", o.Device, strings.Join(why, "; "), ErrLocked)
}

func (f *fakeDMCrypt) Adopt(_ context.Context, dev, name, uuid string) (CryptOpened, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[name] != dev {
		return CryptOpened{}, false, nil
	}
	if uuid != "" && f.headers[dev].uuid != uuid {
		return CryptOpened{}, false, fmt.Errorf("%s maps LUKS2 volume %s, not %s", name, f.headers[dev].uuid, uuid)
	}
	return CryptOpened{Device: "/dev/mapper/" + name, UUID: f.headers[dev].uuid, Adopted: true}, true, nil
}

// Resize makes the mapping the device's size less the header, with a
// key the header enrolled.
func (f *fakeDMCrypt) Resize(_ context.Context, o CryptOpen) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.headers[o.Device]
	for _, k := range o.Keys {
		if slices.Contains(h.keys, k.File) {
			f.resizes++
			if f.sizes != nil {
				f.sizes["/dev/mapper/"+o.Name] = f.sizes[o.Device] - fakeHeaderBytes
			}
			return nil
		}
	}
	return fmt.Errorf("resize %s: %w", o.Name, ErrLocked)
}

func (f *fakeDMCrypt) Close(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.open, name)
	return nil
}

func encrypted(d *Desired, keyFiles ...string) *Desired {
	l := &manifest.LUKS2{}
	for _, k := range keyFiles {
		l.Keys = append(l.Keys, manifest.LUKS2Key{File: k})
	}
	spec := *d.Spec
	spec.Encryption = &manifest.Encryption{LUKS2: l}
	spec.Filesystem = &manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}
	d.Spec = &spec
	return d
}

func mapped(v *store.Volume) *store.Volume {
	v.Mapping = &store.Mapping{Name: MappingName(v.Name), UUID: "u", Device: "/dev/mapper/" + MappingName(v.Name), KeyKind: "file"}
	return v
}

// A raw block volume's consumer gets the plaintext: the mapping once it
// is open, never the ciphertext under it.
func TestRawBlockDevice(t *testing.T) {
	rawEnc := &Desired{Name: "a", Block: true, Spec: &manifest.VolumeSpec{Encryption: &manifest.Encryption{LUKS2: &manifest.LUKS2{Keys: []manifest.LUKS2Key{{File: "/k"}}}}}}
	raw := &Desired{Name: "a", Block: true, Spec: &manifest.VolumeSpec{}}
	cases := []struct {
		name   string
		d      *Desired
		rec    *store.Volume
		dev    string
		wantOK bool
	}{
		{"plain", raw, have("a", true, false), "/dev/loop1", true},
		{"encrypted and open", rawEnc, mapped(have("a", true, false)), "/dev/mapper/volumed-a", true},
		{"encrypted, not open yet", rawEnc, have("a", true, false), "", false},
		{"not attached", raw, have("a", false, false), "", false},
	}
	for _, c := range cases {
		dev, ok := rawBlockDevice(c.d, c.rec)
		if dev != c.dev || ok != c.wantOK {
			t.Errorf("%s: rawBlockDevice = %q, %v; want %q, %v", c.name, dev, ok, c.dev, c.wantOK)
		}
	}
}

func cryptAgent(t *testing.T) (*Agent, *fakeDMCrypt) {
	t.Helper()
	a := sessionAgent(t, &fakeTarget{})
	f := newFakeDMCrypt()
	a.cfg.Crypt = f
	a.cfg.FS = &fakeFS{}
	return a, f
}

// A blank device gets a header (its UUID in the encrypt intent) and is
// opened; the record says by which kind of key, and holds no key.
func TestOpenFormatsBlankThenOpens(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k1", "/etc/k2")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	if f.formats != 1 || f.opens != 1 || rec.Mapping == nil {
		t.Fatalf("formats %d, opens %d, record %+v; want one of each and a mapping", f.formats, f.opens, rec)
	}
	want := store.Mapping{Name: "volumed-a", UUID: f.headers["/dev/fake-a"].uuid, Device: "/dev/mapper/volumed-a", KeyKind: "file"}
	if *rec.Mapping != want {
		t.Errorf("mapping %+v, want %+v", *rec.Mapping, want)
	}
	if got := blockDevice(rec); got != "/dev/mapper/volumed-a" {
		t.Errorf("the filesystem goes on %s, want the mapping", got)
	}
	ev := a.history.of("a")
	if len(ev) != 1 || ev[0].Op != OpEncrypt {
		t.Errorf("events %+v, want the encrypt", ev)
	}

	// Closed (a reboot) and opened again: the header is kept.
	if err := a.opClose(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	if rec := a.state.Get("a"); rec.Mapping != nil {
		t.Fatalf("mapping still recorded after close: %+v", rec.Mapping)
	}
	if err := a.opOpen(ctx, encrypted(netVolume("a"), "/etc/k2")); err != nil {
		t.Fatal(err)
	}
	if f.formats != 1 || f.opens != 2 {
		t.Errorf("after a reopen: formats %d, opens %d; want 1, 2", f.formats, f.opens)
	}
}

// No key opens the header: the volume is Locked with the reasons, the
// header stays as it was, and a key that works clears the condition.
func TestWrongKeyLocks(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/wrong")
	a.manifests.replace(map[string]*Desired{"a": d}, nil)
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	f.headers["/dev/fake-a"] = fakeHeader{uuid: "theirs", keys: []string{"/etc/right"}}
	err := a.opOpen(ctx, d)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("open: %v, want ErrLocked", err)
	}
	if f.formats != 0 || f.headers["/dev/fake-a"].uuid != "theirs" {
		t.Errorf("the header was touched: formats %d, header %+v", f.formats, f.headers["/dev/fake-a"])
	}
	v := a.Status()[0]
	c, ok := condition(v, CondLocked)
	if !ok || c.Reason != "NoKeyOpens" || !strings.Contains(c.Message, "key 0 (file /etc/wrong): does not match any keyslot") {
		t.Errorf("conditions %+v, want Locked naming the key and why", v.Conditions)
	}
	if v.Encryption == nil || v.Encryption.State != api.EncryptionLocked {
		t.Errorf("encryption status %+v, want locked", v.Encryption)
	}
	if err := a.opOpen(ctx, encrypted(netVolume("a"), "/etc/wrong", "/etc/right")); err != nil {
		t.Fatal(err)
	}
	if _, ok := condition(a.Status()[0], CondLocked); ok {
		t.Error("Locked still set after a key opened the volume")
	}
}

// A device with a filesystem or another signature is never given a
// header.
func TestOpenRefusesNonBlank(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	a.cfg.FS = &probeFS{sigs: []Signature{{Type: "xfs", Usage: "filesystem"}}}
	d := encrypted(netVolume("a"), "/etc/k")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	err := a.opOpen(ctx, d)
	if err == nil || !strings.Contains(err.Error(), "never encrypts over it") {
		t.Fatalf("open: %v, want a refusal", err)
	}
	if f.formats != 0 {
		t.Errorf("%d formats of a device holding xfs", f.formats)
	}
}

type probeFS struct {
	fakeFS
	sigs []Signature
}

func (p *probeFS) Probe(context.Context, string) ([]Signature, error) { return p.sigs, nil }

// Start-up adopts an open mapping of ours without reopening it; one that
// is gone (a reboot) is opened again by the next pass.
func TestReconstructAdoptsMapping(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	v := &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, rec.Mapping.UUID)
	if v.Mapping == nil || *v.Mapping != *rec.Mapping {
		t.Fatalf("adopted %+v, want the record's %+v", v.Mapping, rec.Mapping)
	}
	if f.opens != 1 {
		t.Errorf("%d opens, want 1: adoption reopened", f.opens)
	}
	// A mapping of another header than the one recorded is not adopted.
	v = &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, "another-uuid")
	if v.Mapping != nil {
		t.Errorf("a mapping of another LUKS2 volume was adopted: %+v", v.Mapping)
	}
	// The UUID an uncertain open was opening counts when no record says.
	intents := []store.Intent{{Volume: "a", Op: OpOpen, Inputs: map[string]string{"uuid": "u-open"}}}
	if got := mappingUUID("a", &store.Volume{Name: "a"}, intents); got != "u-open" {
		t.Errorf("mappingUUID from an open intent = %q, want u-open", got)
	}
	if got := mappingUUID("a", rec, intents); got != rec.Mapping.UUID {
		t.Errorf("mappingUUID with a record = %q, want the record's %q", got, rec.Mapping.UUID)
	}
	f.Close(ctx, "volumed-a")
	v = &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, rec.Mapping.UUID)
	if v.Mapping != nil {
		t.Errorf("a closed mapping was adopted: %+v", v.Mapping)
	}
	if ops := decide.Plan(map[string]*Desired{"a": d}, map[string]*store.Volume{"a": v}); len(ops) != 1 || ops[0].Kind != OpOpen {
		t.Errorf("after a reboot the plan is %+v, want open", ops)
	}
}

func TestEncryptionStatus(t *testing.T) {
	enc := encrypted(wantA(), "/k")
	locked := []api.Condition{{Type: CondLocked}}
	cases := []struct {
		name  string
		d     *Desired
		rec   *store.Volume
		conds []api.Condition
		want  *api.Encryption
	}{
		{"not encrypted", wantA(), have("a", true, true), nil, nil},
		{"open", enc, mapped(have("a", true, true)), nil,
			&api.Encryption{State: "open", Mapping: "/dev/mapper/volumed-a", UUID: "u", KeyKind: "file"}},
		{"open, manifest gone", nil, mapped(have("a", true, false)), nil,
			&api.Encryption{State: "open", Mapping: "/dev/mapper/volumed-a", UUID: "u", KeyKind: "file"}},
		{"locked", enc, have("a", true, false), locked, &api.Encryption{State: "locked"}},
		{"not yet open", enc, nil, nil, &api.Encryption{State: "closed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := encryptionStatus(c.d, c.rec, c.conds); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// An encrypt cut short by a crash is redone with the UUID its intent
// recorded, over its own torn header; a torn header of another UUID is
// never written over.
func TestInterruptedEncryptIsRedoneWithItsUUID(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		torn      string // the UUID of the torn header on the device
		wantUUID  string
		wantError string
	}{
		{"its own torn header", "u-intent", "u-intent", ""},
		{"another torn header", "u-other", "u-other", "damaged or torn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, f := cryptAgent(t)
			d := encrypted(netVolume("a"), "/etc/k")
			if err := a.opAttach(ctx, d); err != nil {
				t.Fatal(err)
			}
			f.headers["/dev/fake-a"] = fakeHeader{uuid: c.torn, torn: true}
			a.formats.encrypting.set("a", "u-intent") // as reconstruct does from the intent
			err := a.opOpen(ctx, d)
			if c.wantError == "" && err != nil || c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)) {
				t.Fatalf("open: %v, want %q", err, c.wantError)
			}
			if h := f.headers["/dev/fake-a"]; h.uuid != c.wantUUID {
				t.Errorf("header UUID %q, want %q", h.uuid, c.wantUUID)
			}
			if c.wantError != "" && f.formats != 0 {
				t.Errorf("%d formats over another volume's torn header", f.formats)
			}
		})
	}
}

// verifyingTarget is a fakeTarget whose attachments verify at the device
// they were recorded with.
type verifyingTarget struct{ fakeTarget }

func (*verifyingTarget) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	return at.Device, true, nil
}

// Start-up: an open mapping of a volume's record is adopted with the key
// kind the record kept, nothing opened; a mapping that is gone leaves the
// volume to be opened; an encrypt left uncertain is remembered with its
// UUID for the open that redoes it.
func TestReconstructEncrypted(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	a.cfg.Attachers = map[string]Attacher{"fake": &verifyingTarget{}}
	st := a.cfg.Store
	at := func(name string) *store.Attachment {
		return &store.Attachment{Driver: "fake", Device: "/dev/fake-" + name, Identity: "fake:" + name, Owned: true}
	}
	open := &store.Volume{Name: "open", Driver: "fake", Attachment: at("open"),
		Mapping: &store.Mapping{Name: "volumed-open", UUID: "u-open", Device: "/dev/mapper/volumed-open", KeyKind: "file"}}
	rebooted := &store.Volume{Name: "rebooted", Driver: "fake", Attachment: at("rebooted"),
		Mapping: &store.Mapping{Name: "volumed-rebooted", UUID: "u-reb", Device: "/dev/mapper/volumed-rebooted", KeyKind: "file"}}
	encrypting := &store.Volume{Name: "encrypting", Driver: "fake", Attachment: at("encrypting")}
	for _, v := range []*store.Volume{open, rebooted, encrypting} {
		if err := st.Put(v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Begin(store.Intent{Volume: "encrypting", Op: OpEncrypt, Inputs: map[string]string{"uuid": "u-intent"}}); err != nil {
		t.Fatal(err)
	}
	f.headers["/dev/fake-open"] = fakeHeader{uuid: "u-open", keys: []string{"/k"}}
	f.headers["/dev/fake-rebooted"] = fakeHeader{uuid: "u-reb", keys: []string{"/k"}}
	f.open["volumed-open"] = "/dev/fake-open"
	desired := map[string]*Desired{}
	for _, n := range []string{"open", "rebooted", "encrypting"} {
		desired[n] = encrypted(netVolume(n), "/k")
	}
	a.manifests.replace(desired, nil)
	if err := a.reconstruct(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.state.Get("open").Mapping; got == nil || *got != *open.Mapping {
		t.Errorf("open's mapping %+v, want the record's %+v adopted", got, open.Mapping)
	}
	if got := a.state.Get("rebooted").Mapping; got != nil {
		t.Errorf("rebooted's mapping is gone from the kernel but recorded: %+v", got)
	}
	if uuid, ok := a.formats.encrypting.of("encrypting"); !ok || uuid != "u-intent" {
		t.Errorf("interrupted encrypt remembered as %q, %v; want u-intent", uuid, ok)
	}
	if f.opens != 0 {
		t.Errorf("%d opens at start-up, want none", f.opens)
	}
	ops := decide.Plan(desired, a.state.Snapshot())
	want := []Op{{Volume: "encrypting", Kind: OpOpen}, {Volume: "open", Kind: OpMountDevice}, {Volume: "rebooted", Kind: OpOpen}}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("plan after start-up %+v, want %+v", ops, want)
	}
}

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
	now, err := a.observeSizes(d, rec)
	if err != nil || decide.GrowNeeded(d, rec, now) {
		t.Fatalf("as opened: sizes %+v (%v), grow needed %v; want none", now, err, decide.GrowNeeded(d, rec, now))
	}
	sizes["/dev/fake-a"] = 96 * mi // the LUN grew
	if now, err = a.observeSizes(d, rec); err != nil || now.Device != 80*mi || !decide.GrowNeeded(d, rec, now) {
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

// ext4 names its sysfs directory after the kernel's name of the device,
// which a mapping's path (/dev/mapper/volumed-x, for dm-N) is not: the
// error count of an encrypted volume was read from a directory that
// never exists, so its errors were never seen.
func TestExt4SysByKernelName(t *testing.T) {
	// Any block device the kernel knows will do; a node of it under
	// another name stands for the mapping's path.
	ents, err := os.ReadDir("/sys/dev/block")
	if err != nil || len(ents) == 0 {
		t.Fatalf("no block device in /sys/dev/block to name by another path: %v", err)
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(ents[0].Name(), "%d:%d", &major, &minor); err != nil {
		t.Fatalf("/sys/dev/block/%s: %v", ents[0].Name(), err)
	}
	target, err := os.Readlink(filepath.Join("/sys/dev/block", ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(t.TempDir(), "volumed-x")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatalf("mknod %s (root is needed): %v", node, err)
	}
	want := "/sys/fs/ext4/" + filepath.Base(target)
	if got := ext4Sys(node); got != want {
		t.Errorf("ext4Sys(%s, block %d:%d) = %s, want %s", node, major, minor, got, want)
	}
}
