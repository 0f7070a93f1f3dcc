package manifest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// WriteFile keeps the mode of an existing file and is subject to umask.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// rel renders problems with the test's temporary root cut off.
func rel(root string, probs []Problem) []string {
	out := []string{}
	for _, p := range probs {
		out = append(out, strings.ReplaceAll(p.Error(), root+"/", ""))
	}
	return out
}

func relPaths(root string, paths []string) []string {
	out := []string{}
	for _, p := range paths {
		out = append(out, strings.TrimPrefix(p, root+"/"))
	}
	return out
}

func tmpfsVolume(name string, mounts ...string) string {
	s := "apiVersion: volumed/v1\nkind: Volume\nmetadata:\n  name: " + name + "\nspec:\n  source: {tmpfs: {size: 1Mi}}\n"
	if len(mounts) > 0 {
		s += "  mounts:\n"
		for _, m := range mounts {
			s += "    - path: " + m + "\n"
		}
	}
	return s
}

func TestEffectiveFiles(t *testing.T) {
	root := t.TempDir()
	usr := mkdir(t, root, "usr")
	etc := mkdir(t, root, "etc")
	run := mkdir(t, root, "run")
	for _, n := range []string{"a.yaml", "b.yaml", "c.yaml", "d.yml", "e.json", "f.yaml", "g.yaml", "notes.txt", ".hidden.yaml", "h.yaml.bak"} {
		write(t, usr, n, tmpfsVolume("x"))
	}
	write(t, etc, "b.yaml", tmpfsVolume("x"))             // overrides usr/b.yaml
	symlink(t, "/dev/null", filepath.Join(etc, "c.yaml")) // masks usr/c.yaml
	symlink(t, "/dev/null", filepath.Join(etc, "f.yaml")) // masked, then
	write(t, run, "f.yaml", tmpfsVolume("x"))             // brought back by a later dir
	// A chain of links ending at /dev/null masks too.
	symlink(t, "/dev/null", filepath.Join(root, "null"))
	symlink(t, filepath.Join(root, "null"), filepath.Join(run, "g.yaml"))
	write(t, run, "d.yml", tmpfsVolume("x"))
	// A masking link with no earlier file to mask is simply nothing.
	symlink(t, "/dev/null", filepath.Join(run, "z.yaml"))

	files, probs := EffectiveFiles([]string{usr, etc, filepath.Join(root, "missing"), run}, Options{Kinds: testKinds})
	if len(probs) > 0 {
		t.Errorf("problems: %q", rel(root, probs))
	}
	want := []string{"usr/a.yaml", "etc/b.yaml", "run/d.yml", "usr/e.json", "run/f.yaml"}
	if got := relPaths(root, files); !slices.Equal(got, want) {
		t.Errorf("effective files %q, want %q", got, want)
	}
}

func TestEffectiveFilesBadDir(t *testing.T) {
	root := t.TempDir()
	usr := mkdir(t, root, "usr")
	etc := mkdir(t, root, "etc")
	write(t, usr, "a.yaml", tmpfsVolume("a"))
	write(t, usr, "b.yaml", tmpfsVolume("b"))
	symlink(t, "/dev/null", filepath.Join(etc, "a.yaml"))
	write(t, etc, "b.yaml", tmpfsVolume("b"))
	if err := os.Chmod(etc, 0o777); err != nil {
		t.Fatal(err)
	}
	notDir := write(t, root, "file", "")

	files, probs := EffectiveFiles([]string{usr, etc, notDir}, Options{CheckOwnership: true, Kinds: testKinds})
	wantProbs := []string{
		"etc: refused: mode 0777 lets group or others write it",
		"file: cannot read: not a directory",
	}
	if got := rel(root, probs); !slices.Equal(got, wantProbs) {
		t.Errorf("problems %q, want %q", got, wantProbs)
	}
	// An untrusted directory's mask is not obeyed: its entries are
	// returned so that ParseFile refuses them and their last good objects stay.
	if got, want := relPaths(root, files), []string{"etc/a.yaml", "etc/b.yaml"}; !slices.Equal(got, want) {
		t.Errorf("effective files %q, want %q", got, want)
	}
	for _, f := range files {
		objs, probs := ParseFile(f, Options{CheckOwnership: true, Kinds: testKinds})
		if want := []string{"etc: refused: mode 0777 lets group or others write it"}; objs != nil || !slices.Equal(rel(root, probs), want) {
			t.Errorf("ParseFile(%s): %d objects, problems %q; want %q", f, len(objs), rel(root, probs), want)
		}
	}
}

func TestParseFileOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the ownership checks need root to chown test files")
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, file string)
		want  []string
	}{
		{"root 0644 in 0755", func(t *testing.T, dir, file string) {}, []string{}},
		{"root 0600 in 0700", func(t *testing.T, dir, file string) {
			chmod(t, file, 0o600)
			chmod(t, dir, 0o700)
		}, []string{}},
		{"file 0666", func(t *testing.T, dir, file string) { chmod(t, file, 0o666) },
			[]string{"d/a.yaml: refused: mode 0666 lets group or others write it"}},
		{"file group-writable", func(t *testing.T, dir, file string) { chmod(t, file, 0o664) },
			[]string{"d/a.yaml: refused: mode 0664 lets group or others write it"}},
		{"file owned by uid 1000", func(t *testing.T, dir, file string) { chown(t, file, 1000) },
			[]string{"d/a.yaml: refused: owned by uid 1000, not root"}},
		{"dir 0777", func(t *testing.T, dir, file string) { chmod(t, dir, 0o777) },
			[]string{"d: refused: mode 0777 lets group or others write it"}},
		{"dir owned by uid 1000", func(t *testing.T, dir, file string) { chown(t, dir, 1000) },
			[]string{"d: refused: owned by uid 1000, not root"}},
		{"symlink to a 0666 file", func(t *testing.T, dir, file string) {
			target := filepath.Join(filepath.Dir(dir), "elsewhere.yaml")
			if err := os.Rename(file, target); err != nil {
				t.Fatal(err)
			}
			chmod(t, target, 0o666)
			symlink(t, target, file)
		}, []string{"d/a.yaml: refused: mode 0666 lets group or others write it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := mkdir(t, root, "d")
			file := write(t, dir, "a.yaml", tmpfsVolume("a"))
			tt.setup(t, dir, file)
			objs, probs := ParseFile(file, Options{CheckOwnership: true, Kinds: testKinds})
			if got := rel(root, probs); !slices.Equal(got, tt.want) {
				t.Errorf("problems %q, want %q", got, tt.want)
			}
			if (len(objs) == 1) != (len(tt.want) == 0) {
				t.Errorf("%d objects", len(objs))
			}
			// Without the check, the same file is accepted.
			if objs, probs := ParseFile(file, Options{Kinds: testKinds}); len(objs) != 1 || len(probs) > 0 {
				t.Errorf("unchecked: %d objects, problems %q", len(objs), rel(root, probs))
			}
		})
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, 0); err != nil {
		t.Fatal(err)
	}
}

func TestParseFileNotRegular(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	mkdir(t, root, "dir.yaml")
	symlink(t, "/dev/zero", filepath.Join(root, "zero.yaml"))
	for _, tt := range []struct{ name, want string }{
		{"fifo.yaml", "fifo.yaml: not a regular file"}, // must not block waiting for a writer
		{"dir.yaml", "dir.yaml: not a regular file"},
		{"zero.yaml", "zero.yaml: not a regular file"},
		{"missing.yaml", "missing.yaml: cannot read: no such file or directory"},
	} {
		objs, probs := ParseFile(filepath.Join(root, tt.name), Options{Kinds: testKinds})
		if got := rel(root, probs); objs != nil || !slices.Equal(got, []string{tt.want}) {
			t.Errorf("%s: %d objects, problems %q, want %q", tt.name, len(objs), got, tt.want)
		}
	}
}

func TestParseFileTooBig(t *testing.T) {
	root := t.TempDir()
	p := write(t, root, "big.yaml", tmpfsVolume("a")+"# "+strings.Repeat("x", MaxFileSize)+"\n")
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	_, probs := ParseFile(p, Options{Kinds: testKinds})
	want := []string{"big.yaml: too big: " + itoa64(st.Size()) + " bytes, the limit is 1 MiB"}
	if got := rel(root, probs); !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

func TestParseFileNonUTF8(t *testing.T) {
	root := t.TempDir()
	// Latin-1, as an old editor might save it.
	p := write(t, root, "latin1.yaml", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: caf\xe9}\n")
	_, probs := ParseFile(p, Options{Kinds: testKinds})
	if got, want := rel(root, probs), []string{"latin1.yaml:3:21: not valid UTF-8"}; !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
