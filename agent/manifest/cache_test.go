package manifest_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	. "github.com/volumed/volumed/agent/manifest"
)

// later is a clock past the racy window of every file the tests write.
func later() time.Time { return time.Now().Add(time.Hour) }

// A Load decodes only the files that changed: an unchanged file is taken
// from the cache, what it accepts and refuses exactly as parsed fresh.
func TestLoadDecodesOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", tmpfsVolume("a", "/srv/a"))
	write("b.yaml", tmpfsVolume("b", "/srv/b"))
	write("bad.yaml", tmpfsVolume("c", "relative/path")+"  bogus: 1\n")
	opts := Options{Kinds: testKinds}
	b := NewBuilder([]string{dir}, opts)
	b.SetClock(later)
	first := b.Load()
	if n := b.Decoded(); n != 3 {
		t.Fatalf("first Load decoded %d files, want 3", n)
	}
	again := b.Load()
	if n := b.Decoded(); n != 3 {
		t.Errorf("a Load with nothing changed decoded %d more files, want none", n-3)
	}
	fresh := NewBuilder([]string{dir}, opts).Load()
	for _, res := range []*Result{first, again} {
		if !reflect.DeepEqual(res.Problems, fresh.Problems) || !reflect.DeepEqual(res.BadFiles, fresh.BadFiles) {
			t.Errorf("problems from the cache %+v (bad %v), parsed fresh %+v (bad %v)", res.Problems, res.BadFiles, fresh.Problems, fresh.BadFiles)
		}
		if len(res.Problems) == 0 || len(res.Volumes) != 2 {
			t.Errorf("got %d volumes and problems %+v, want a and b and bad.yaml's problems", len(res.Volumes), res.Problems)
		}
	}

	write("b.yaml", tmpfsVolume("b", "/srv/B"))
	res := b.Load()
	if n := b.Decoded(); n != 4 {
		t.Errorf("after one file's edit a Load decoded %d files, want 1", n-3)
	}
	if got := summary(dir, res.Volumes); !reflect.DeepEqual(got, []string{"a(a.yaml) /srv/a", "b(b.yaml) /srv/B"}) {
		t.Errorf("after the edit: %q", got)
	}
}

// An edit that keeps a file's size and puts its mtime back (cp -p, a tool
// restoring timestamps) still changes its ctime: it is decoded again.
func TestLoadDecodesAnEditThatKeepsSizeAndMtime(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(p, []byte(tmpfsVolume("a", "/srv/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder([]string{dir}, Options{Kinds: testKinds})
	b.SetClock(later)
	b.Load()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past the ctime's granularity
	if err := os.WriteFile(p, []byte(tmpfsVolume("a", "/srv/b")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.Stat(p); now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
		t.Fatal("the test's edit changed the size or the mtime")
	}
	res := b.Load()
	if n := b.Decoded(); n != 2 {
		t.Errorf("the edit was decoded %d times, want once", n-1)
	}
	if got := summary(dir, res.Volumes); !reflect.DeepEqual(got, []string{"a(a.yaml) /srv/b"}) {
		t.Errorf("after the edit the volume is %q, want its new target", got)
	}
}

// A file changed within the timestamps' granularity of a Load could be
// changed again with its identity kept: it is decoded again at the next
// Load until it is older than that.
func TestLoadDecodesARecentFileAgain(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(tmpfsVolume("a", "/srv/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder([]string{dir}, Options{Kinds: testKinds})
	b.Load()
	b.Load()
	if n := b.Decoded(); n != 2 {
		t.Errorf("a file written just now was decoded %d times in two Loads, want 2", n)
	}
}

// The checks that read no bytes are made at every Load: a cached file
// whose directory turned group-writable is refused as a fresh parse
// refuses it.
func TestCachedFileIsStillCheckedForOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ownership checks need files owned by root: run as root (make test and CI do)")
	}
	dir := filepath.Join(t.TempDir(), "volumes.d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(tmpfsVolume("a", "/srv/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Kinds: testKinds, CheckOwnership: true}
	b := NewBuilder([]string{dir}, opts)
	b.SetClock(later)
	if res := b.Load(); len(res.Problems) != 0 {
		t.Fatalf("problems %+v", res.Problems)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	res := b.Load()
	fresh := NewBuilder([]string{dir}, opts).Load()
	if len(res.Problems) == 0 || !reflect.DeepEqual(res.Problems, fresh.Problems) {
		t.Errorf("problems %+v, parsed fresh %+v", res.Problems, fresh.Problems)
	}
	// Refused as a whole (its last good objects kept), as a fresh parse
	// refuses it.
	if len(res.BadFiles) != 1 || !reflect.DeepEqual(res.BadFiles, fresh.BadFiles) {
		t.Errorf("bad files %v, parsed fresh %v", res.BadFiles, fresh.BadFiles)
	}
}
