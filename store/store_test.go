package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/bbolt"
)

const (
	// checkEnv makes the test binary act as cmd/volumed's hidden check subcommand.
	checkEnv = "VOLUMED_STORE_CHECK"
	// rawOpenEnv makes the test binary do what Open must never do: let bbolt read an unchecked
	// file in-process, to show that the fault really happens and only kills the child.
	rawOpenEnv = "VOLUMED_STORE_RAWOPEN"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(checkEnv); p != "" {
		if err := CheckFile(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if p := os.Getenv(rawOpenEnv); p != "" {
		os.Exit(rawOpen(p))
	}
	os.Exit(m.Run())
}

func rawOpen(path string) int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n := 0
	_ = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error { n += len(k) + len(v); return nil })
		})
	})
	fmt.Fprintln(os.Stderr, "read", n, "bytes without faulting")
	return 0
}

// childCommand re-executes the test binary with env set to path.
func childCommand(env string) func(string) error {
	return func(p string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env+"="+p)
		return runChild(ctx, cmd)
	}
}

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testOpts() Options {
	return Options{Now: func() time.Time { return testNow }, Check: childCommand(checkEnv)}
}

func mustOpen(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, rec, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if rec != nil {
		t.Fatalf("Open of a healthy file recovered: %+v", rec)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sampleVolume(name string) *Volume {
	return &Volume{
		Name:       name,
		Driver:     "loop",
		Attachment: &Attachment{Driver: "loop", Device: "/dev/loop3", Identity: "loop:/img/" + name + ".img@2049:1234", Owned: true},
		Staging:    &MountRecord{Path: "/var/lib/volumed/staging/" + name, Device: "/dev/loop3", FSType: "ext4", MountID: 42, Owned: true},
		Targets: []MountRecord{
			{Path: "/srv/" + name, SubPath: "data", ReadOnly: true, MountID: 43, Owned: true},
			{Path: "/mnt/" + name, Owned: false},
		},
		UpdatedAt: testNow.Add(-time.Hour),
	}
}

func TestRoundTripAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "state.db")
	s := mustOpen(t, path, testOpts())

	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("state dir mode = %o, want 700", perm)
	}

	a, b := sampleVolume("a"), sampleVolume("b")
	b.UpdatedAt = time.Time{} // the store stamps a zero time
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(b); err != nil {
		t.Fatal(err)
	}
	id1, err := s.Begin(Intent{Volume: "a", Op: "publish", Inputs: map[string]string{"target": "/srv/a"}})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := s.Begin(Intent{Volume: "b", Op: "detach", StartedAt: testNow.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if id2 <= id1 {
		t.Errorf("intent ids not increasing: %d then %d", id1, id2)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	wantB := *b
	wantB.UpdatedAt = testNow
	want := map[string]*Volume{"a": a, "b": &wantB}
	if !reflect.DeepEqual(vols, want) {
		t.Errorf("volumes after reopen:\n got %+v\nwant %+v", vols, want)
	}
	wantIntents := []Intent{
		{ID: id1, Volume: "a", Op: "publish", Inputs: map[string]string{"target": "/srv/a"}, StartedAt: testNow},
		{ID: id2, Volume: "b", Op: "detach", StartedAt: testNow.Add(time.Minute)},
	}
	if !reflect.DeepEqual(intents, wantIntents) {
		t.Errorf("intents after reopen:\n got %+v\nwant %+v", intents, wantIntents)
	}

	// Sequence numbers survive a reopen, so an old leftover intent is never overwritten.
	id3, err := s.Begin(Intent{Volume: "a", Op: "grow"})
	if err != nil {
		t.Fatal(err)
	}
	if id3 <= id2 {
		t.Errorf("intent id after reopen %d, want > %d", id3, id2)
	}
}

func TestFinishIsOneDurableTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := mustOpen(t, path, testOpts())
	id, err := s.Begin(Intent{Volume: "v", Op: "attach"})
	if err != nil {
		t.Fatal(err)
	}
	_, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 1 || intents[0].ID != id || intents[0].Op != "attach" {
		t.Fatalf("after Begin, intents = %+v", intents)
	}

	before := s.Commits()
	v := sampleVolume("v")
	if err := s.Finish(id, "v", v); err != nil {
		t.Fatal(err)
	}
	if got := s.Commits() - before; got != 1 {
		t.Errorf("Finish took %d commits, want 1", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 0 {
		t.Errorf("intent still present after Finish: %+v", intents)
	}
	if !reflect.DeepEqual(vols["v"], v) {
		t.Errorf("record after Finish = %+v, want %+v", vols["v"], v)
	}
}

func TestFinishNilDeletesRecord(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err := s.Put(sampleVolume("gone")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(sampleVolume("kept")); err != nil {
		t.Fatal(err)
	}
	id, err := s.Begin(Intent{Volume: "gone", Op: "detach"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(id, "gone", nil); err != nil {
		t.Fatal(err)
	}
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vols["gone"]; ok || len(vols) != 1 || vols["kept"] == nil {
		t.Errorf("after Finish(nil) volumes = %v, want only kept", vols)
	}
	if len(intents) != 0 {
		t.Errorf("intents = %+v, want none", intents)
	}
}

func TestDeleteAndDropIntent(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err := s.Put(sampleVolume("v")); err != nil {
		t.Fatal(err)
	}
	id, err := s.Begin(Intent{Volume: "v", Op: "mount_device"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DropIntent(id); err != nil {
		t.Fatal(err)
	}
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 0 || vols["v"] == nil {
		t.Fatalf("after DropIntent: vols %v intents %+v; want record kept, intent gone", vols, intents)
	}
	if err := s.Delete("v"); err != nil {
		t.Fatal(err)
	}
	if vols, _, _ = s.Load(); len(vols) != 0 {
		t.Errorf("after Delete: vols %v", vols)
	}
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	var (
		mu      sync.Mutex
		callers int
	)
	opts := testOpts()
	opts.OnCommit = func(d time.Duration, n int) {
		mu.Lock()
		callers += n
		mu.Unlock()
	}
	s := mustOpen(t, path, opts)
	before := s.Commits()

	const n = 50
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			name := fmt.Sprintf("vol-%02d", i)
			id, err := s.Begin(Intent{Volume: name, Op: "attach"})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Finish(id, name, &Volume{Name: name, Driver: "loop"})
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	commits := s.Commits() - before
	mu.Lock()
	served := callers
	mu.Unlock()
	if served != 2*n {
		t.Errorf("OnCommit saw %d callers, want %d", served, 2*n)
	}
	if commits >= 2*n {
		t.Errorf("%d calls took %d commits; parallel callers did not share fsyncs", 2*n, commits)
	}
	t.Logf("%d calls, %d commits", 2*n, commits)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, path, testOpts())
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != n || len(intents) != 0 {
		t.Errorf("after reopen: %d volumes, %d intents; want %d, 0", len(vols), len(intents), n)
	}
}

func TestFailingBatchMemberDoesNotFailOthers(t *testing.T) {
	s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
	put := func(name string) *request {
		return &request{done: make(chan error, 1), fn: func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketVolumes).Put([]byte(name), []byte(`{"name":"`+name+`"}`))
		}}
	}
	bad := errors.New("bad request")
	failing := &request{done: make(chan error, 1), fn: func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketVolumes).Put([]byte("half"), []byte(`{"name":"half"}`)); err != nil {
			return err
		}
		return bad
	}}
	a, b := put("a"), put("b")
	before := s.Commits()
	s.commit([]*request{a, failing, b})

	if err := <-a.done; err != nil {
		t.Errorf("a: %v", err)
	}
	if err := <-b.done; err != nil {
		t.Errorf("b: %v", err)
	}
	if err := <-failing.done; !errors.Is(err, bad) {
		t.Errorf("failing request got %v, want %v", err, bad)
	}
	if got := s.Commits() - before; got != 1 {
		t.Errorf("commits = %d, want 1 (a and b together)", got)
	}
	vols, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if vols["a"] == nil || vols["b"] == nil || vols["half"] != nil {
		t.Errorf("volumes = %v, want a and b without the failed request's write", vols)
	}
}

func TestWritesAfterCloseFail(t *testing.T) {
	s, _, err := Open(filepath.Join(t.TempDir(), "state.db"), testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(Intent{Volume: "v", Op: "attach"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Begin after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

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

// Benchmarks: one op is a Begin plus a Finish, the two durable writes of every operation.
// "group" goes through the Store's commit queue, "update-per-call" is a plain db.Update per write.

func benchStore(b *testing.B) *Store {
	s, _, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func groupOp(s *Store, name string) error {
	id, err := s.Begin(Intent{Volume: name, Op: "publish"})
	if err != nil {
		return err
	}
	return s.Finish(id, name, &Volume{Name: name, Driver: "loop"})
}

// updateOp is the baseline: the same two writes, each its own db.Update and fsync.
func updateOp(s *Store, name string) error {
	var id uint64
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		var err error
		if id, err = b.NextSequence(); err != nil {
			return err
		}
		return b.Put(intentKey(id), []byte(`{"volume":"`+name+`","op":"publish"}`))
	})
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Delete(intentKey(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketVolumes).Put([]byte(name), []byte(`{"name":"`+name+`","driver":"loop"}`))
	})
	return err
}

func BenchmarkBeginFinishSerial(b *testing.B) {
	b.Run("group", func(b *testing.B) {
		s := benchStore(b)
		before := s.Commits()
		for i := 0; b.Loop(); i++ {
			if err := groupOp(s, fmt.Sprintf("v%d", i%64)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(s.Commits()-before)/float64(b.N), "commits/op")
	})
	b.Run("update-per-call", func(b *testing.B) {
		s := benchStore(b)
		for i := 0; b.Loop(); i++ {
			if err := updateOp(s, fmt.Sprintf("v%d", i%64)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2, "commits/op")
	})
}

func BenchmarkBeginFinishParallel(b *testing.B) {
	// 32 goroutines whatever GOMAXPROCS is: many volumes' operations in flight at once.
	const goroutines = 32
	run := func(b *testing.B, op func(s *Store, name string) error) *Store {
		s := benchStore(b)
		ops := make(chan int)
		var wg sync.WaitGroup
		var errOnce sync.Once
		var firstErr error
		for g := range goroutines {
			wg.Go(func() {
				for i := range ops {
					if err := op(s, fmt.Sprintf("g%d-v%d", g, i%8)); err != nil {
						errOnce.Do(func() { firstErr = err })
					}
				}
			})
		}
		b.ResetTimer()
		for i := range b.N {
			ops <- i
		}
		close(ops)
		wg.Wait()
		b.StopTimer()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		return s
	}
	b.Run("group", func(b *testing.B) {
		s := run(b, groupOp)
		b.ReportMetric(float64(s.Commits())/float64(b.N), "commits/op")
	})
	b.Run("update-per-call", func(b *testing.B) {
		run(b, updateOp)
		b.ReportMetric(2, "commits/op")
	})
}

// FinishLater returns before its fsync; whatever it queued is on disk
// after Close, and a later Begin's commit carries it too.
func TestFinishLaterIsCommittedByCloseAndNextCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := mustOpen(t, path, testOpts())
	var ids []uint64
	for i := 0; i < 50; i++ {
		id, err := s.Begin(Intent{Volume: fmt.Sprintf("v%d", i), Op: "attach"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		if err := s.FinishLater(id, fmt.Sprintf("v%d", i), &Volume{Name: fmt.Sprintf("v%d", i), Driver: "loop"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishLater(1, "x", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("FinishLater after Close: %v, want ErrClosed", err)
	}
	s = mustOpen(t, path, testOpts())
	defer s.Close()
	vols, intents, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 50 || len(intents) != 0 {
		t.Fatalf("after Close: %d records, %d intents; want 50, 0", len(vols), len(intents))
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
		if err := s.Put(&Volume{Name: "x", Driver: "loop"}); err != nil {
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

// Outcomes nobody waits for ride the next intent's fsync instead of
// costing one of their own (which also delayed that intent by a whole
// commit), and still reach the disk when no intent comes.
func TestOutcomesRideTheNextIntent(t *testing.T) {
	// In a bubble the clock moves only when every goroutine waits: the
	// ride's timer cannot fire while the test is still queueing.
	synctest.Test(t, func(t *testing.T) {
		s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
		defer s.Close()
		var ids []uint64
		for i := 0; i < 10; i++ {
			id, err := s.Begin(Intent{Volume: fmt.Sprintf("v%d", i), Op: "attach"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		ignore := func(error) {}
		before := s.Commits()
		for i, id := range ids[:9] {
			if err := s.FinishLater(id, fmt.Sprintf("v%d", i), &Volume{Name: fmt.Sprintf("v%d", i), Driver: "loop"}, ignore); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Begin(Intent{Volume: "v0", Op: "mount_device"}); err != nil {
			t.Fatal(err)
		}
		if got := s.Commits() - before; got != 1 {
			t.Errorf("9 outcomes and an intent took %d commits, want 1", got)
		}
		vols, _, err := s.Load()
		if err != nil || len(vols) != 9 {
			t.Fatalf("after the intent's commit: %d records (%v), want the 9 outcomes", len(vols), err)
		}

		before = s.Commits()
		if err := s.FinishLater(ids[9], "v9", &Volume{Name: "v9", Driver: "loop"}, ignore); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the committer holds it, waiting for company
		if got := s.Commits() - before; got != 0 {
			t.Errorf("an outcome alone took %d commits at once, want it to ride", got)
		}
		time.Sleep(rideDelay)
		synctest.Wait()
		if vols, _, err := s.Load(); err != nil || vols["v9"] == nil {
			t.Fatalf("an outcome alone is not committed after %v: %v", rideDelay, err)
		}
	})
}

// Flush sends what rides at once: when the agent has converged no intent
// comes to carry the last outcomes, and a power cut right after would
// leave their intents to resolve.
func TestFlushCommitsWhatRides(t *testing.T) {
	// In a bubble the clock moves only when every goroutine waits, so
	// "at once" is exact: the ride's timer has not fired.
	synctest.Test(t, func(t *testing.T) {
		s := mustOpen(t, filepath.Join(t.TempDir(), "state.db"), testOpts())
		defer s.Close()
		id, err := s.Begin(Intent{Volume: "a", Op: "publish"})
		if err != nil {
			t.Fatal(err)
		}
		before := s.Commits()
		s.Flush() // nothing rides: no commit
		if err := s.FinishLater(id, "a", &Volume{Name: "a", Driver: "loop"}, func(error) {}); err != nil {
			t.Fatal(err)
		}
		s.Flush()
		synctest.Wait() // the commit is done, and the bubble's clock has not moved
		if got := s.Commits() - before; got != 1 {
			t.Errorf("%d commits at once, want 1 (an empty Flush commits nothing; what rides is sent before the %v ride ends)", got, rideDelay)
		}
		if _, intents, err := s.Load(); err != nil || len(intents) != 0 {
			t.Errorf("intents on disk after the flush: %v, %v", intents, err)
		}
	})
}
