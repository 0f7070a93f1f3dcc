package luks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testtool"
)

const testUUID = "6a0c7c1e-9d1b-4f7e-8a55-0d6f0b1f2c3d"

// fast is for the tests' random keys: no slow KDF.
var fast = PBKDF{Type: "pbkdf2", Iterations: 1000}

func needCryptsetup(t *testing.T) {
	t.Helper()
	testtool.Need(t, "cryptsetup-bin", "cryptsetup")
}

func img(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

// keyFile writes a key file of mode 0600 and returns it with its content.
func keyFile(t *testing.T, content []byte) (FileKey, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return FileKey{Path: p}, content
}

func randomKey(t *testing.T) (FileKey, []byte) {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return keyFile(t, b)
}

func hashFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// procWatch records, for every cryptsetup the client starts, its argv
// and environment as /proc shows them to other processes.
//
// A fast cryptsetup (a pbkdf2 keyslot, a token import) can be gone by
// the time the hook runs, a zombie whose cmdline reads empty; so watch
// has the client start each one through a gate, a shell that waits on a
// FIFO until the hook has read its /proc entries and then execs
// cryptsetup with the same arguments and environment.
type procWatch struct {
	mu      sync.Mutex
	seen    [][]byte
	started int    // commands the client started
	live    int    // of them, seen in /proc as cryptsetup
	gate    string // the FIFO
}

// watch makes c run cryptsetup (c.Cryptsetup as it is now) through the
// gate and report each start to w.
func (w *procWatch) watch(t *testing.T, c *Client) {
	t.Helper()
	dir := t.TempDir()
	w.gate = filepath.Join(dir, "gate")
	if err := unix.Mkfifo(w.gate, 0o600); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "cryptsetup-gated")
	script := fmt.Sprintf("#!/bin/sh\n: < %s\nexec %s \"$@\"\n", w.gate, c.bin())
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c.Cryptsetup = wrapper
	c.observe = w.observe
}

func (w *procWatch) observe(cmd *exec.Cmd) {
	w.mu.Lock()
	w.started++
	w.mu.Unlock()
	for _, f := range []string{"cmdline", "environ"} {
		b := readProcFilled(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f))
		w.mu.Lock()
		w.seen = append(w.seen, b)
		if f == "cmdline" && bytes.Contains(b, []byte("cryptsetup")) {
			w.live++
		}
		w.mu.Unlock()
	}
	// Let it run: opening the FIFO for writing meets the gate's read.
	if f, err := os.OpenFile(w.gate, os.O_WRONLY, 0); err == nil {
		f.Close()
	}
}

// readProcFilled reads a /proc/PID file of a process held at the gate.
// Start returns while the kernel is still inside the exec: until it has
// laid out the new program's stack, cmdline and environ read empty (a
// read there made this test fail about once in 40 runs on a busy
// machine). The gate keeps the process from exiting, so they fill in.
func readProcFilled(path string) []byte {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil || len(b) > 0 || time.Now().After(deadline) {
			return b
		}
	}
}

func (w *procWatch) check(t *testing.T, keys ...[]byte) {
	t.Helper()
	if w.live == 0 || w.live != w.started {
		t.Fatalf("%d of the %d cryptsetups started were seen running: the /proc check proved nothing of the others", w.live, w.started)
	}
	for _, s := range w.seen {
		for _, k := range keys {
			if bytes.Contains(s, k) {
				t.Fatalf("a key is in a cryptsetup's /proc cmdline or environ: %q", s)
			}
		}
	}
}

func TestFormatEnrolsEveryKey(t *testing.T) {
	needCryptsetup(t)
	dev := img(t, 32<<20)
	k1, b1 := randomKey(t)
	// A key file written by echo ends in a newline; cryptsetup --key-file
	// reads it with the newline, and so must we, or an operator's manual
	// open with the same file fails.
	k2, b2 := keyFile(t, []byte("correct horse battery staple\n"))
	w := &procWatch{}
	c := &Client{}
	w.watch(t, c)
	ctx := context.Background()
	err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k1, k2}, PBKDF: fast, SectorSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	w.check(t, b1, b2, bytes.TrimSpace(b2))

	in, err := InspectDevice(dev)
	if err != nil {
		t.Fatal(err)
	}
	best, ok := in.Best()
	if !ok || best.UUID != testUUID || best.Keyslots != 2 {
		t.Fatalf("after format: %+v", in.Copies)
	}
	for _, k := range []FileKey{k1, k2} {
		if ok, err := c.CheckKey(ctx, dev, k); err != nil || !ok {
			t.Errorf("%s does not open the new volume: %v %v", k.Describe(), ok, err)
		}
	}
	out, err := exec.Command("cryptsetup", "open", "--test-passphrase", "--key-file", k2.Path, dev).CombinedOutput()
	if err != nil {
		t.Errorf("plain cryptsetup with the same key file: %v %s", err, out)
	}
	wrong, _ := randomKey(t)
	if ok, err := c.CheckKey(ctx, dev, wrong); err != nil || ok {
		t.Errorf("a wrong key: ok %v err %v, want false, nil", ok, err)
	}

	// The same intent again (a restart) writes nothing; another UUID is
	// refused: the header is whole, with keyslots.
	before := hashFile(t, dev)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k1, k2}, PBKDF: fast}); err != nil {
		t.Fatalf("the same format again: %v, want a no-op", err)
	}
	if hashFile(t, dev) != before {
		t.Fatal("repeating a finished format changed the device")
	}
	err = c.Format(ctx, FormatOptions{Device: dev, UUID: "11111111-2222-3333-4444-555555555555", Keys: []Key{k1}, PBKDF: fast})
	if !errors.Is(err, ErrNotBlank) {
		t.Fatalf("format with another UUID: %v, want ErrNotBlank", err)
	}
	if hashFile(t, dev) != before {
		t.Fatal("a refused format changed the device")
	}
}

// A crash after luksFormat but before every key was added: running the
// intent again adds the missing keys and leaves the data area alone.
func TestFormatResumesEnrolment(t *testing.T) {
	needCryptsetup(t)
	ctx := context.Background()
	c := &Client{}
	k1, _ := randomKey(t)
	k2, _ := randomKey(t)
	dev := img(t, 32<<20)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k1}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	marker := []byte("data written through the mapping")
	if _, err := f.WriteAt(marker, 16<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k1, k2}, PBKDF: fast}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if ok, _ := c.CheckKey(ctx, dev, k2); !ok {
		t.Fatal("the missing key was not enrolled")
	}
	b, _ := os.ReadFile(dev)
	if !bytes.Equal(b[16<<20:16<<20+len(marker)], marker) {
		t.Fatal("resuming the enrolment touched the data area")
	}
	if in, _ := InspectDevice(dev); func() bool { h, _ := in.Best(); return h.Keyslots != 2 }() {
		t.Fatalf("keyslots after resume: %+v", in.Copies)
	}

	// Our UUID, but none of the keys opens it (the key files were
	// replaced): locked, and the header stays.
	k3, _ := randomKey(t)
	before := hashFile(t, dev)
	err = c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k3}, PBKDF: fast})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("resume with keys that do not open it: %v, want ErrLocked", err)
	}
	if hashFile(t, dev) != before {
		t.Fatal("a locked resume changed the device")
	}
}

func TestFormatRefusesWhatIsThere(t *testing.T) {
	needCryptsetup(t)
	testtool.Need(t, "e2fsprogs", "mkfs.ext4")
	ctx := context.Background()
	c := &Client{}
	k, _ := randomKey(t)

	ext4 := img(t, 32<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", ext4).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	foreign := img(t, 32<<20)
	if err := c.Format(ctx, FormatOptions{Device: foreign, UUID: "11111111-2222-3333-4444-555555555555", Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	// A foreign header torn in both copies: not ours to redo either.
	tornForeign := img(t, 32<<20)
	copyFile(t, foreign, tornForeign)
	tear(t, tornForeign)

	// Plain dm-crypt, a raw database: data and no signature (issue 22).
	random := img(t, 32<<20)
	rf, err := os.OpenFile(random, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(rf, rand.Reader, 4<<20); err != nil {
		t.Fatal(err)
	}
	rf.Close()

	for name, dev := range map[string]string{"ext4": ext4, "foreign LUKS2": foreign, "torn foreign LUKS2": tornForeign, "random bytes": random} {
		before := hashFile(t, dev)
		err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast})
		if !errors.Is(err, ErrNotBlank) {
			t.Errorf("%s: format gave %v, want ErrNotBlank", name, err)
		}
		if hashFile(t, dev) != before {
			t.Errorf("%s: the refused format changed the device", name)
		}
	}

	// An unreadable key fails before the device is written.
	blank := img(t, 32<<20)
	lax, _ := keyFile(t, []byte("k"))
	if err := os.Chmod(lax.Path, 0o644); err != nil {
		t.Fatal(err)
	}
	before := hashFile(t, blank)
	if err := c.Format(ctx, FormatOptions{Device: blank, UUID: testUUID, Keys: []Key{k, lax}, PBKDF: fast}); err == nil ||
		!strings.Contains(err.Error(), lax.Path) {
		t.Errorf("a world-readable key file: %v, want an error naming it", err)
	}
	if hashFile(t, blank) != before {
		t.Error("a format with a bad key file wrote the device")
	}
}

// tear damages the JSON area of both header copies, as a crash in the
// middle of luksFormat's writes would.
func tear(t *testing.T, dev string) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int64{0, 0x4000} {
		if _, err := f.WriteAt([]byte("garbage"), off+binHeaderSize+1); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFormatRedoesItsOwnTornHeader(t *testing.T) {
	needCryptsetup(t)
	ctx := context.Background()
	c := &Client{}
	k, _ := randomKey(t)
	dev := img(t, 32<<20)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	tear(t, dev)
	if ok, _ := c.CheckKey(ctx, dev, k); ok {
		t.Fatal("the torn header still opens: the test tore nothing")
	}
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatalf("redo of our own interrupted format: %v", err)
	}
	if ok, err := c.CheckKey(ctx, dev, k); !ok || err != nil {
		t.Fatalf("after the redo the key does not open it: %v", err)
	}
}

func TestOpenWithWrongKeysLeavesDeviceAlone(t *testing.T) {
	needCryptsetup(t)
	ctx := context.Background()
	c := &Client{SysRoot: t.TempDir()} // no dm devices
	right, rb := randomKey(t)
	dev := img(t, 32<<20)
	if err := c.Format(ctx, FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{right}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	before := hashFile(t, dev)
	w1, b1 := randomKey(t)
	w2, b2 := keyFile(t, []byte("not it"))
	missing := FileKey{Path: filepath.Join(t.TempDir(), "absent")}
	// Without device-mapper, cryptsetup open would fail before it
	// looked at a key; the stand-in checks the keys and maps nothing,
	// which is all an open with wrong keys does.
	useNoDMCryptsetup(t, c)
	w := &procWatch{}
	w.watch(t, c)
	_, err := c.Open(ctx, OpenOptions{Device: dev, Name: "volumed-t", UUID: testUUID, Keys: []Key{w1, missing, w2}})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || len(le.Failures) != 3 {
		t.Fatalf("open with wrong keys: %v, want a LockedError with three reasons", err)
	}
	if !strings.Contains(err.Error(), missing.Path) || !strings.Contains(err.Error(), "does not match any keyslot") {
		t.Errorf("the error does not say why each key failed: %v", err)
	}
	for _, k := range [][]byte{b1, b2, rb} {
		if bytes.Contains([]byte(err.Error()), k) {
			t.Fatal("a key is in the error")
		}
	}
	w.check(t, b1, b2, rb)
	if hashFile(t, dev) != before {
		t.Fatal("failed opens changed the device")
	}

	if _, err := c.Open(ctx, OpenOptions{Device: dev, Name: "volumed-t"}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "no keys given") {
		t.Errorf("open without keys: %v, want ErrLocked saying no keys were given", err)
	}
	_, err = c.Open(ctx, OpenOptions{Device: dev, Name: "volumed-t", UUID: "11111111-2222-3333-4444-555555555555", Keys: []Key{right}})
	if !errors.Is(err, ErrWrongUUID) {
		t.Errorf("open expecting another UUID: %v, want ErrWrongUUID", err)
	}
	_, err = c.Open(ctx, OpenOptions{Device: img(t, 1<<20), Name: "volumed-t", Keys: []Key{right}})
	if !errors.Is(err, ErrNoHeader) {
		t.Errorf("open of a blank device: %v, want ErrNoHeader", err)
	}
}

// fakeDM lays out /sys/block/dm-N for a mapping in root.
func fakeDM(t *testing.T, root string, n int, name, uuid, slave string) {
	t.Helper()
	dir := filepath.Join(root, "block", fmt.Sprintf("dm-%d", n))
	files := map[string]string{"dm/name": name, "dm/uuid": uuid, "dev": fmt.Sprintf("253:%d", n),
		"slaves/vdb/dev": slave}
	for f, v := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMappingsFromSysfs(t *testing.T) {
	root := t.TempDir()
	fakeDM(t, root, 0, "volumed-data", "CRYPT-LUKS2-6a0c7c1e9d1b4f7e8a550d6f0b1f2c3d-volumed-data", "254:16")
	fakeDM(t, root, 1, "vg-root", "LVM-abc", "8:2")
	c := &Client{SysRoot: root}
	m, ok, err := c.Mapping("volumed-data")
	if err != nil || !ok {
		t.Fatalf("Mapping: %v %v", ok, err)
	}
	if !m.Crypt() || m.LUKSUUID() != testUUID || m.Dev != "253:0" || len(m.Slaves) != 1 || m.Slaves[0] != "254:16" {
		t.Errorf("mapping = %+v (LUKS UUID %q)", m, m.LUKSUUID())
	}
	lvm, _, _ := c.Mapping("vg-root")
	if lvm.Crypt() || lvm.LUKSUUID() != "" {
		t.Errorf("an LVM volume taken for a crypt mapping: %+v", lvm)
	}
	if _, ok, _ := c.Mapping("volumed-none"); ok {
		t.Error("found a mapping that is not there")
	}
	// A name that is not ours is never closed.
	if err := c.Close(context.Background(), "vg-root"); !errors.Is(err, ErrMappingTaken) {
		t.Errorf("close of an LVM volume: %v, want ErrMappingTaken", err)
	}
	if err := c.Close(context.Background(), "volumed-none"); err != nil {
		t.Errorf("close of an absent mapping: %v, want success", err)
	}
	// Nor adopted: the name is taken by a mapping that is not this
	// volume's (here: it sits on another device than a plain file).
	needCryptsetup(t)
	k, _ := randomKey(t)
	dev := img(t, 32<<20)
	if err := c.Format(context.Background(), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(context.Background(), OpenOptions{Device: dev, Name: "volumed-data", Keys: []Key{k}})
	if !errors.Is(err, ErrMappingTaken) {
		t.Errorf("open when the name's mapping is on another device: %v, want ErrMappingTaken", err)
	}
}
