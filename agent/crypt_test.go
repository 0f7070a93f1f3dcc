package agent

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/volumed/volumed/agent/api"
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
	// formatErr, when set, is what the next Format returns, having
	// written nothing (a key server that did not answer).
	formatErr error
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
	if err := f.formatErr; err != nil {
		f.formatErr = nil
		return err
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
	if !ok || c.Reason != "NoKeyOpens" || !strings.Contains(c.Message, "key 0 (file /etc/wrong): does not match any keyslot") ||
		!strings.Contains(c.Message, "open it with a recovery key as volumed-a (cryptsetup open /dev/fake-a volumed-a)") {
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

// waitErr is a driver's locked error for a key server that did not
// answer.
type waitErr struct{}

func (waitErr) Error() string {
	return "/dev/fake-a: no key opens its LUKS2 header; key 0 (tang http://t): waiting for tang server http://t: connection refused"
}
func (waitErr) Waiting() string      { return "waiting for tang server http://t: connection refused" }
func (waitErr) Is(target error) bool { return target == ErrLocked }

// A new volume whose key server does not answer at its format gets no
// header, says it waits for the server, and is formatted once it answers:
// the header's UUID the identity learnt before the format is the one
// formatted then (it was IdentityChanged for good: a blank device where
// the volume's header was recorded).
func TestFormatWaitsForItsKeyServer(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k")
	a.manifests.replace(map[string]*Desired{"a": d}, nil)
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	f.formatErr = fmt.Errorf("luks format /dev/fake-a: key 0 (tang http://t): %w", waitErr{})
	if err := a.opOpen(ctx, d); err == nil {
		t.Fatal("open with the key server down went through")
	}
	if _, ok := f.headers["/dev/fake-a"]; ok || f.formats != 0 {
		t.Fatalf("a header was written while the key server was down: %+v", f.headers)
	}
	if c, ok := condition(a.Status()[0], CondLocked); !ok || c.Reason != "WaitingForKeyServer" {
		t.Fatalf("Locked = %+v (present %v), want WaitingForKeyServer", c, ok)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatalf("open once the server answers: %v", err)
	}
	if f.formats != 1 || a.state.Get("a").Mapping == nil {
		t.Fatalf("formats %d, mapping %+v: want the volume formatted and open", f.formats, a.state.Get("a").Mapping)
	}
	for _, c := range a.Status()[0].Conditions {
		t.Errorf("condition left: %+v", c)
	}
}

// A volume whose key server does not answer is Locked, and the message
// says first which server it waits for and its last error.
func TestWaitingForKeyServerLocks(t *testing.T) {
	ctx := context.Background()
	a, _ := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k")
	a.manifests.replace(map[string]*Desired{"a": d}, nil)
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	a.noteLocked("a", fmt.Errorf("open: %w", waitErr{}))
	c, ok := condition(a.Status()[0], CondLocked)
	if !ok || c.Reason != "WaitingForKeyServer" || !strings.HasPrefix(c.Message, "waiting for tang server http://t: connection refused") {
		t.Fatalf("Locked = %+v (present %v), want WaitingForKeyServer starting with the server and its error", c, ok)
	}
	if e := a.Status()[0].Encryption; e == nil || e.State != api.EncryptionLocked {
		t.Errorf("encryption status %+v, want locked", e)
	}
	a.noteLocked("a", nil)
	if _, ok := condition(a.Status()[0], CondLocked); ok {
		t.Error("Locked still set after the open went through")
	}
}

// A volume whose key server does not answer waits, it is not in error:
// Pending, with its Locked condition saying for which server; any other
// failure of its open is an Error.
func TestWaitingForKeyServerIsPending(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("luks format /dev/fake-a: key 0 (tang http://t): %w", waitErr{}), api.PhasePending},
		{errors.New("luks format /dev/fake-a: input/output error"), api.PhaseError},
	} {
		a, f := cryptAgent(t)
		d := encrypted(netVolume("a"), "/etc/k")
		a.manifests.replace(map[string]*Desired{"a": d}, nil)
		if err := a.opAttach(ctx, d); err != nil {
			t.Fatal(err)
		}
		f.formatErr = tc.err
		a.exec.Start(ctx, "a", OpOpen, func(ctx context.Context) error { return a.opOpen(ctx, d) }, nil)
		a.exec.Wait()
		if got := a.Status()[0].Phase; got != tc.want {
			t.Errorf("open failing with %q: phase %s, want %s", tc.err, got, tc.want)
		}
	}
}
