package store

// A damaged, foreign or locked state file at Open: checked in a child, moved aside, never lost.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"
)

// populated writes n volume records in one transaction and returns the file's bytes.
func populated(t *testing.T, path string, n int) []byte {
	t.Helper()
	s := mustOpen(t, path, Options{})
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for i := range n {
			v := sampleVolume(fmt.Sprintf("volume-%05d", i))
			_, data, err := s.encode(v)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketVolumes).Put([]byte(v.Name), data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(Intent{Volume: "volume-00001", Op: "publish"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// usedBytes is the extent the newest meta page claims; bbolt grows the file ahead of it.
func usedBytes(data []byte) int {
	m0, m1 := data[pageHeaderSize:], data[4096+pageHeaderSize:]
	m := m0
	if binary.NativeEndian.Uint64(m1[48:]) > binary.NativeEndian.Uint64(m0[48:]) {
		m = m1
	}
	return int(binary.NativeEndian.Uint64(m[40:])) * int(binary.NativeEndian.Uint32(m[8:]))
}

// rootPage reads the root bucket's page id from the first meta page.
func rootPage(data []byte) (pgid uint64, pageSize int) {
	m := data[pageHeaderSize:]
	return binary.NativeEndian.Uint64(m[16:]), int(binary.NativeEndian.Uint32(m[8:]))
}

func TestOpenDamagedFileMovesItAside(t *testing.T) {
	cases := []struct {
		name       string
		damage     func(t *testing.T, path string) []byte
		wantReason string
	}{
		{"random bytes", func(t *testing.T, path string) []byte {
			data := make([]byte, 64<<10)
			_, _ = rand.Read(data)
			return data
		}, "no valid meta page"},
		{"truncated to 8 KiB", func(t *testing.T, path string) []byte {
			return populated(t, path, 2000)[:8<<10]
		}, "truncated"},
		{"truncated to half", func(t *testing.T, path string) []byte {
			data := populated(t, path, 4000)
			if usedBytes(data) <= len(data)/2 {
				t.Fatalf("half of %d bytes keeps all %d used bytes: not a damaging truncation", len(data), usedBytes(data))
			}
			return data[:len(data)/2]
		}, "truncated"},
		// Meta pages intact, so only the child's full bbolt check can find this one.
		{"garbage root page", func(t *testing.T, path string) []byte {
			data := populated(t, path, 2000)
			root, ps := rootPage(data)
			_, _ = rand.Read(data[int(root)*ps : int(root+1)*ps])
			return data
		}, "check:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			orig := tc.damage(t, path)
			if err := os.WriteFile(path, orig, 0o600); err != nil {
				t.Fatal(err)
			}

			s, rec, err := Open(path, testOpts())
			if err != nil {
				t.Fatalf("Open of a damaged file: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			wantMoved := path + ".corrupt-20250102T030405Z"
			if rec == nil || rec.MovedTo != wantMoved {
				t.Fatalf("Recovery = %+v, want MovedTo %s", rec, wantMoved)
			}
			if !strings.Contains(rec.Reason, tc.wantReason) {
				t.Errorf("Reason %q does not mention %q", rec.Reason, tc.wantReason)
			}
			t.Logf("reason: %s", rec.Reason)
			kept, err := os.ReadFile(rec.MovedTo)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kept, orig) {
				t.Errorf("moved-aside file differs from the damaged original (%d vs %d bytes)", len(kept), len(orig))
			}

			vols, intents, err := s.Load()
			if err != nil || len(vols) != 0 || len(intents) != 0 {
				t.Fatalf("fresh store Load = %v, %v, %v; want empty", vols, intents, err)
			}
			if err := s.Put(sampleVolume("after")); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := mustOpen(t, path, testOpts())
			if vols, _, _ := s2.Load(); vols["after"] == nil {
				t.Errorf("record written after recovery is lost: %v", vols)
			}
		})
	}
}

func TestOpenWithoutCheckerSurvivesGarbagePage(t *testing.T) {
	// Without a child checker, a damaged data page that passes PrecheckFile is read in-process;
	// it must still become a Recovery, not a crash.
	path := filepath.Join(t.TempDir(), "state.db")
	data := populated(t, path, 2000)
	root, ps := rootPage(data)
	for i := range ps {
		data[int(root)*ps+i] = 0xff
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, rec, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rec == nil {
		t.Fatal("no Recovery for a file with a garbage root page")
	}
	t.Logf("reason: %s", rec.Reason)
}

func TestChildCheckOfTruncatedFileDoesNotKillParent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	data := populated(t, path, 2000)
	if err := os.WriteFile(path, data[:8<<10], 0o600); err != nil {
		t.Fatal(err)
	}

	// What bbolt does to an unchecked truncated file: the child dies of SIGBUS...
	err := childCommand(rawOpenEnv)(path)
	if err == nil || !strings.Contains(err.Error(), "SIGBUS") {
		t.Fatalf("raw bbolt read of a truncated file in a child: %v; want a SIGBUS death", err)
	}
	t.Logf("raw child: %.200s", err)

	// ...CheckFile in a child reports it without faulting...
	err = childCommand(checkEnv)(path)
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("CheckFile in a child: %v; want exit 1 naming the truncation", err)
	}
	// ...and the parent is still here to say so, and the file is untouched.
	if got, _ := os.ReadFile(path); len(got) != 8<<10 {
		t.Errorf("check changed the file to %d bytes", len(got))
	}
	if err := CheckFile(path); err == nil {
		t.Error("in-process CheckFile accepted a truncated file")
	}
}

func TestChildCheckMapsChildFate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	ok := ChildCheck("/bin/sh", "-c", `test -n "$1"`, "sh")
	if err := ok(path); err != nil {
		t.Errorf("zero exit: %v", err)
	}
	err := ChildCheck("/bin/sh", "-c", `echo "cannot read $1" >&2; exit 3`, "sh")(path)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "cannot read "+path) {
		t.Errorf("error exit: %v; want exit status and the child's stderr with the path", err)
	}
	err = ChildCheck("/bin/sh", "-c", `echo dying >&2; kill -BUS $$`, "sh")(path)
	if err == nil || !strings.Contains(err.Error(), "signal bus error") || !strings.Contains(err.Error(), "dying") {
		t.Errorf("signal death: %v", err)
	}
	err = ChildCheck(filepath.Join(t.TempDir(), "no-such-binary"))(path)
	if !errors.Is(err, ErrCheckUnavailable) {
		t.Errorf("missing checker: %v, want ErrCheckUnavailable", err)
	}
}

func TestUnavailableCheckerIsNotCorruption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	orig := populated(t, path, 10)
	os.Remove(path + ".clean") // as after a crash: the check must run
	opts := testOpts()
	opts.Check = ChildCheck(filepath.Join(t.TempDir(), "no-such-binary"))
	s, rec, err := Open(path, opts)
	if err == nil {
		s.Close()
		t.Fatalf("Open with a checker that cannot start succeeded (recovery %+v)", rec)
	}
	if !errors.Is(err, ErrCheckUnavailable) || rec != nil {
		t.Errorf("err %v, rec %+v; want ErrCheckUnavailable and no Recovery", err, rec)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
		t.Error("healthy file was changed or moved")
	}
}

func TestUnknownSchemaIsMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	populated(t, path, 10)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("2")) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	s, rec, err := Open(path, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rec == nil || !strings.Contains(rec.Reason, "schema") {
		t.Fatalf("Recovery = %+v, want one about the schema", rec)
	}
	if kept, _ := os.ReadFile(rec.MovedTo); !bytes.Equal(kept, orig) {
		t.Error("moved-aside file differs from the original")
	}
	if vols, _, _ := s.Load(); len(vols) != 0 {
		t.Errorf("fresh store has %d volumes", len(vols))
	}
}

func TestSecondOpenIsAnErrorNotARecovery(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	first := mustOpen(t, path, testOpts())
	if err := first.Put(sampleVolume("v")); err != nil {
		t.Fatal(err)
	}

	s, rec, err := Open(path, testOpts())
	if err == nil {
		s.Close()
		t.Fatal("second Open of a held file succeeded")
	}
	if !errors.Is(err, ErrLocked) || rec != nil {
		t.Errorf("second Open: err %v, rec %+v; want ErrLocked, no Recovery", err, rec)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".corrupt-") {
			t.Errorf("held file was moved aside: %s", e.Name())
		}
	}
	// The first store is unharmed.
	if vols, _, err := first.Load(); err != nil || vols["v"] == nil {
		t.Errorf("first store after the failed second Open: %v, %v", vols, err)
	}
}

func TestMovedAsideNameIsNeverReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	for i := range 2 {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("garbage %d", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		s, rec, err := Open(path, testOpts())
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		want := path + ".corrupt-20250102T030405Z"
		if i == 1 {
			want += ".1"
		}
		if rec == nil || rec.MovedTo != want {
			t.Fatalf("recovery %d: %+v, want MovedTo %s", i, rec, want)
		}
		if got, _ := os.ReadFile(want); string(got) != fmt.Sprintf("garbage %d", i) {
			t.Errorf("%s holds %q", want, got)
		}
	}
}

func TestPrecheckFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	data := populated(t, path, 100)
	if err := PrecheckFile(path); err != nil {
		t.Fatalf("healthy file: %v", err)
	}
	if err := CheckFile(path); err != nil {
		t.Fatalf("CheckFile of a healthy file: %v", err)
	}
	_, ps := rootPage(data)

	// One torn meta page is what bbolt is built to survive; the other one must carry it.
	for _, page := range []int{0, 1} {
		d := bytes.Clone(data)
		d[page*ps+pageHeaderSize+20] ^= 0xff
		if err := os.WriteFile(path, d, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := PrecheckFile(path); err != nil {
			t.Errorf("meta %d damaged, other intact: %v", page, err)
		}
	}
	d := bytes.Clone(data)
	d[pageHeaderSize+20] ^= 0xff
	d[ps+pageHeaderSize+20] ^= 0xff
	if err := os.WriteFile(path, d, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrecheckFile(path); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("both metas damaged: %v", err)
	}
	used := usedBytes(data)
	if err := os.WriteFile(path, data[:used], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrecheckFile(path); err != nil {
		t.Errorf("file cut exactly at its used extent: %v", err)
	}
	if err := os.WriteFile(path, data[:used-ps], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrecheckFile(path); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("file one used page short: %v", err)
	}
}

// A file closed cleanly is opened without the child check; one written
// after the clean close (or after a crash, no marker) is checked.
func TestCleanCloseSkipsCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	populated(t, path, 3)
	checked := 0
	opts := testOpts()
	opts.Check = func(string) error { checked++; return nil }
	open := func() {
		t.Helper()
		s, _, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Put(&Volume{Name: "x", Kind: "loop"}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	open()
	if checked != 0 {
		t.Fatalf("a cleanly closed file was checked %d times", checked)
	}
	// Changed behind the marker's back: checked again.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	open()
	if checked != 1 {
		t.Fatalf("a file changed after its clean close was checked %d times, want 1", checked)
	}
	// A crash leaves no marker: checked.
	s, _, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".clean"); !os.IsNotExist(err) {
		t.Fatalf("the marker stays while the file is open: %v", err)
	}
	_ = s // not closed: as if killed
	checked = 0
	s.db.Close() // release the lock without the clean marker
	open()
	if checked != 1 {
		t.Fatalf("a file whose writer died was checked %d times, want 1", checked)
	}
}
