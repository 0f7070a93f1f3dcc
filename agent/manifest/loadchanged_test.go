package manifest_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// historyGen writes random histories into two drop-in directories: files
// created, edited in place or written aside and renamed in, renamed,
// removed, masked, made invalid, made writable by others; objects whose
// names, image files and targets are drawn from small pools, so that
// claims conflict and targets nest.
type historyGen struct {
	t    *testing.T
	rng  *rand.Rand
	dirs []string
}

var (
	genNames   = []string{"a", "b", "c", "d", "e"}
	genImages  = []string{"/img/1", "/img/2", "/img/3", "/img/4"}
	genTargets = []string{"/srv/a", "/srv/b", "/srv/a/b", "/srv/c", "/srv/c/d/e", "/srv/f"}
	genBases   = []string{"10-a.yaml", "20-b.yaml", "30-c.yml", "40-d.json", "50-e.yaml", "60-f.yaml"}
)

func (g *historyGen) pick(s []string) string { return s[g.rng.IntN(len(s))] }

func (g *historyGen) object() string {
	name := g.pick(genNames)
	if g.rng.IntN(5) == 0 {
		return mountObj("m"+name, g.pick(genNames), g.pick(genTargets))
	}
	mounts := []string{g.pick(genTargets)}
	if g.rng.IntN(4) == 0 {
		mounts = append(mounts, g.pick(genTargets))
	}
	return loopVolume(name, g.pick(genImages), mounts...)
}

func (g *historyGen) content() string {
	switch g.rng.IntN(8) {
	case 0:
		return g.object() + "  bogus: 1\n" // refused as a whole
	case 1:
		return "kind: [unclosed\n"
	case 2:
		return g.object() + "---\n" + g.object()
	}
	return g.object()
}

func (g *historyGen) write(p, s string) {
	g.t.Helper()
	_ = os.Remove(p) // a mask is a symlink: never write through it
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// step changes the directories and returns every path it touched.
func (g *historyGen) step() []string {
	dir := g.pick(g.dirs)
	p := filepath.Join(dir, g.pick(genBases))
	switch g.rng.IntN(9) {
	case 0, 1:
		g.write(p, g.content())
		return []string{p}
	case 2, 3:
		tmp := filepath.Join(dir, "."+filepath.Base(p)+".tmp")
		g.write(tmp, g.content())
		if err := os.Rename(tmp, p); err != nil {
			g.t.Fatal(err)
		}
		return []string{tmp, p}
	case 4:
		to := filepath.Join(g.pick(g.dirs), g.pick(genBases))
		if err := os.Rename(p, to); err != nil && !os.IsNotExist(err) {
			g.t.Fatal(err)
		}
		return []string{p, to}
	case 5:
		_ = os.Remove(p)
		return []string{p}
	case 6:
		last := filepath.Join(g.dirs[len(g.dirs)-1], filepath.Base(p))
		_ = os.Remove(last)
		if err := os.Symlink("/dev/null", last); err != nil {
			g.t.Fatal(err)
		}
		return []string{last}
	case 7:
		if err := os.Chmod(p, 0o666); err != nil && !os.IsNotExist(err) {
			g.t.Fatal(err)
		}
		return []string{p}
	}
	// A change the watch names that changes nothing.
	return []string{p, filepath.Join(dir, "notes.txt")}
}

// render is a Result as a user sees it: every accepted object in full,
// every problem, every refused file.
func renderResult(t *testing.T, res *Result) string {
	t.Helper()
	type obj struct {
		*Object
		Volume, Mount any
		File          string
		Line          int
	}
	var objs []obj
	for _, o := range slices.Concat(res.Volumes, res.Mounts) {
		objs = append(objs, obj{o, o.Volume, o.Mount, o.File, o.Line})
	}
	b, err := json.MarshalIndent(struct {
		Objs     []obj
		Problems []string
		Bad      []string
	}{objs, render(res.Problems), res.BadFiles}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// LoadChanged, told the paths each change touched, gives exactly what a
// full Load gives, over random histories: the same objects accepted, the
// same problems (each file's, the claim conflicts, the nesting) and the
// same files refused. Both Builders see the same history, Load by Load:
// what a Load accepted decides the next one's conflicts.
func TestLoadChangedIsLoad(t *testing.T) {
	seed := uint64(27)
	if s := os.Getenv("VOLUMED_PROP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VOLUMED_PROP_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: VOLUMED_PROP_SEED=%d)", seed, seed)
	fast, slow := 0, 0
	for h := range 40 {
		root := t.TempDir()
		g := &historyGen{t: t, rng: rand.New(rand.NewPCG(seed, uint64(h))), dirs: []string{mkdir(t, root, "usr"), mkdir(t, root, "etc")}}
		opts := Options{Kinds: testKinds, CheckOwnership: os.Geteuid() == 0}
		inc, full := NewBuilder(g.dirs, opts), NewBuilder(g.dirs, opts)
		inc.SetClock(later)
		full.SetClock(later)
		inc.Load()
		full.Load()
		for s := range 60 {
			var touched []string
			for range 1 + g.rng.IntN(3) {
				touched = append(touched, g.step()...)
			}
			f0, a0 := inc.Resolved()
			got := inc.LoadChanged(touched)
			f1, a1 := inc.Resolved()
			fast, slow = fast+f1-f0, slow+a1-a0
			want := full.Load()
			if inc.AcceptedDebug() != full.AcceptedDebug() {
				t.Fatalf("history %d step %d (touched %q, alone %d): accepted inc\n%s\nfull\n%s", h, s, touched, f1-f0, inc.AcceptedDebug(), full.AcceptedDebug())
			}
			if g, w := renderResult(t, got), renderResult(t, want); g != w {
				t.Logf("accepted inc\n%s\nfull\n%s", inc.AcceptedDebug(), full.AcceptedDebug())
				t.Fatalf("history %d step %d (touched %q): LoadChanged gave\n%s\nLoad gave\n%s", h, s, touched, g, w)
			}
		}
	}
	t.Logf("changes decided alone %d times, with every object %d times", fast, slow)
	if fast == 0 || slow == 0 {
		t.Errorf("the histories never took one of the two paths (alone %d, all %d)", fast, slow)
	}
}

// The paths of a change a watch names lead to the files it concerns:
// anything else (the directory itself) makes LoadChanged a full Load.
func TestLoadChangedOnTheDirectoryIsLoad(t *testing.T) {
	root := t.TempDir()
	dir := mkdir(t, root, "etc")
	b := NewBuilder([]string{dir}, Options{Kinds: testKinds})
	b.SetClock(later)
	b.Load()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(tmpfsVolume("a", "/srv/a")), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := b.LoadChanged([]string{dir}); len(res.Volumes) != 1 {
		t.Errorf("an event on the directory: %d volumes, want a.yaml's", len(res.Volumes))
	}
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(tmpfsVolume("b", "/srv/b")), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := b.LoadChanged(nil); len(res.Volumes) != 1 {
		t.Errorf("nothing named: %d volumes, want a.yaml's alone (b.yaml is read at the next event or resync)", len(res.Volumes))
	}
	if res := b.LoadChanged([]string{filepath.Join(dir, "b.yaml")}); len(res.Volumes) != 2 {
		t.Errorf("b.yaml named: %d volumes, want 2", len(res.Volumes))
	}
	// A directory given with a trailing slash names the same files.
	slashed := NewBuilder([]string{dir + "/"}, Options{Kinds: testKinds})
	slashed.SetClock(later)
	slashed.Load()
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(tmpfsVolume("c", "/srv/c")), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := slashed.LoadChanged([]string{filepath.Join(dir, "c.yaml")}); len(res.Volumes) != 3 {
		t.Errorf("c.yaml named: %d volumes, want 3", len(res.Volumes))
	}
	if alone, all := slashed.Resolved(); alone != 1 || all != 0 {
		t.Errorf("c.yaml named to a Builder of %s/: decided alone %d times, with every object %d, want alone once", dir, alone, all)
	}
}
