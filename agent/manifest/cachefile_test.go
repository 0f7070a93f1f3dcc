package manifest_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds"
)

// saved writes files into a new directory, loads them with a builder
// that keeps its cache in a file, saves it, and returns the directory
// and the options a restarted builder would have.
func saved(t *testing.T, opts Options, files map[string]string) (string, Options) {
	t.Helper()
	dir := t.TempDir()
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts.CacheFile = filepath.Join(t.TempDir(), "manifest-cache.json")
	b := NewBuilder([]string{dir}, opts)
	b.SetClock(later)
	b.Load()
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	return dir, opts
}

// sameResult fails unless got is what a fresh parse of dir gives, to the
// last position and capability.
func sameResult(t *testing.T, dir string, opts Options, got *Result) {
	t.Helper()
	opts.CacheFile = ""
	fresh := NewBuilder([]string{dir}, opts).Load()
	if !reflect.DeepEqual(got, fresh) {
		t.Errorf("from the saved cache:\n%+v\nparsed fresh:\n%+v", got, fresh)
		for i := range min(len(got.Volumes), len(fresh.Volumes)) {
			if !reflect.DeepEqual(got.Volumes[i], fresh.Volumes[i]) {
				t.Errorf("volume %d: %+v\nfresh: %+v", i, *got.Volumes[i], *fresh.Volumes[i])
			}
		}
	}
}

// A restart decodes only what changed while it was away; what it
// accepts and refuses is what a fresh parse gives.
func TestSavedCacheDecodesOnlyWhatChanged(t *testing.T) {
	dir, opts := saved(t, Options{Kinds: testKinds}, map[string]string{
		"a.yaml":   tmpfsVolume("a", "/srv/a"),
		"b.yaml":   tmpfsVolume("b", "/srv/b"),
		"bad.yaml": tmpfsVolume("c", "relative/path") + "  bogus: 1\n",
	})
	b := NewBuilder([]string{dir}, opts)
	res := b.Load()
	if b.Decoded() != 1 || b.Restored() != 2 {
		t.Errorf("a restart decoded %d files and restored %d, want bad.yaml decoded (a refused file is never saved) and 2 restored", b.Decoded(), b.Restored())
	}
	sameResult(t, dir, opts, res)

	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(tmpfsVolume("b", "/srv/B")), 0o644); err != nil {
		t.Fatal(err)
	}
	b = NewBuilder([]string{dir}, opts)
	res = b.Load()
	if b.Decoded() != 2 || b.Restored() != 1 {
		t.Errorf("after an edit a restart decoded %d files and restored %d, want b.yaml and bad.yaml decoded, a.yaml restored", b.Decoded(), b.Restored())
	}
	sameResult(t, dir, opts, res)
}

// A corrupt, torn or foreign cache file is no cache: every file is
// parsed, nothing is refused for it.
func TestBadCacheFileIsIgnored(t *testing.T) {
	files := map[string]string{"a.yaml": tmpfsVolume("a", "/srv/a"), "b.yaml": tmpfsVolume("b", "/srv/b")}
	dir, opts := saved(t, Options{Kinds: testKinds}, files)
	good, err := os.ReadFile(opts.CacheFile)
	if err != nil {
		t.Fatal(err)
	}
	foreign := []byte(`{"schema":"another binary","files":{}}`)
	for name, data := range map[string][]byte{
		"garbage": []byte("\x00\x01 not json"),
		"torn":    good[:len(good)/2],
		"foreign": foreign,
		"empty":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(opts.CacheFile, data, 0o600); err != nil {
				t.Fatal(err)
			}
			b := NewBuilder([]string{dir}, opts)
			res := b.Load()
			if b.Decoded() != 2 || b.Restored() != 0 {
				t.Errorf("with a %s cache file: decoded %d, restored %d; want every file decoded", name, b.Decoded(), b.Restored())
			}
			if len(res.Volumes) != 2 || len(res.Problems) != 0 {
				t.Errorf("with a %s cache file: %d volumes, problems %v", name, len(res.Volumes), res.Problems)
			}
			sameResult(t, dir, opts, res)
		})
	}
}

// An entry saved under another schema key (another binary, an upgrade)
// is never used, even for a file that did not change.
func TestCacheOfAnotherSchemaIsIgnored(t *testing.T) {
	dir, opts := saved(t, Options{Kinds: testKinds}, map[string]string{"a.yaml": tmpfsVolume("a", "/srv/a")})
	data, err := os.ReadFile(opts.CacheFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opts.CacheFile, SetCacheSchema(t, data, "volumed-manifest-cache/0"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder([]string{dir}, opts)
	b.Load()
	if b.Decoded() != 1 || b.Restored() != 0 {
		t.Errorf("a cache of another schema: decoded %d, restored %d; want the file decoded", b.Decoded(), b.Restored())
	}
}

// What the validator refuses now (a check that reads more than the
// file: here the state directory the agent now runs with) is said as a
// fresh parse says it, to the line and column, though the file was
// saved clean.
func TestSavedFileIsValidatedAgain(t *testing.T) {
	dir, opts := saved(t, Options{Kinds: testKinds}, map[string]string{"a.yaml": tmpfsVolume("a", "/srv/state/a")})
	opts.StateDir = "/srv/state"
	b := NewBuilder([]string{dir}, opts)
	res := b.Load()
	if len(res.Problems) == 0 || b.Restored() != 0 {
		t.Fatalf("a target under the state dir from a saved clean file: restored %d, problems %v", b.Restored(), res.Problems)
	}
	sameResult(t, dir, opts, res)
}

// Every example the package ships comes back from the saved cache as a
// fresh parse gives it: every kind's source, every position a later
// conflict may point at, what each kind said of its source (Caps).
func TestExamplesRestoreAsParsed(t *testing.T) {
	examples, err := filepath.Glob("../../packaging/examples/*.yaml")
	if err != nil || len(examples) < 5 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	files := map[string]string{}
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = string(data)
	}
	opts := Options{StateDir: "/var/lib/volumed", Kinds: kinds.Manifest(kinds.All())}
	dir, opts := saved(t, opts, files)
	b := NewBuilder([]string{dir}, opts)
	res := b.Load()
	if b.Decoded() != 0 || b.Restored() != len(examples) {
		t.Errorf("decoded %d, restored %d of %d examples", b.Decoded(), b.Restored(), len(examples))
	}
	if len(res.Volumes) == 0 {
		t.Fatal("no volume in the examples")
	}
	sameResult(t, dir, opts, res)
}

// Files a first start read just after they were written (within the racy
// window, so not kept in memory) are read again at the save, once past
// it: else a restart after a first start would decode everything.
func TestSaveKeepsFilesReadWhenJustWritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(tmpfsVolume("a", "/srv/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Kinds: testKinds, CacheFile: filepath.Join(t.TempDir(), "manifest-cache.json")}
	b := NewBuilder([]string{dir}, opts)
	b.Load() // now: within the racy window
	b.SetClock(later)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	b = NewBuilder([]string{dir}, opts)
	res := b.Load()
	if b.Decoded() != 0 || b.Restored() != 1 {
		t.Errorf("a restart decoded %d, restored %d; want a.yaml restored", b.Decoded(), b.Restored())
	}
	sameResult(t, dir, opts, res)
}
