package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// sameFile reports whether the descriptor is the file at p.
func sameFile(t *testing.T, f *os.File, p string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(p, &b); err != nil {
		t.Fatal(err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// wantRefused checks that err is an error naming component.
func wantRefused(t *testing.T, what string, err error, target error, component string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: %v, want %v", what, err, target)
	}
	if !strings.Contains(err.Error(), component) {
		t.Errorf("%s: %q does not name %s", what, err, component)
	}
}

func TestOpenDirCreates(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	f, err := OpenDir(deep, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !sameFile(t, f, deep) || f.Name() != deep {
		t.Fatalf("OpenDir(%s) opened %s, another file", deep, f.Name())
	}
	for _, p := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), deep} {
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v %v, want a 0755 directory", p, fi.Mode(), err)
		}
	}
	again, err := OpenDir(deep+"/", false)
	if err != nil {
		t.Fatalf("OpenDir of an existing directory: %v", err)
	}
	again.Close()
	slash, err := OpenDir("/", false)
	if err != nil || !sameFile(t, slash, "/") {
		t.Fatalf("OpenDir(/) = %v", err)
	}
	slash.Close()

	_, err = OpenDir(filepath.Join(root, "missing", "x"), false)
	wantRefused(t, "missing directory without create", err, os.ErrNotExist, filepath.Join(root, "missing"))
	if _, err := OpenDir("relative/path", true); err == nil {
		t.Error("OpenDir of a relative path succeeded")
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenDir(filepath.Join(file, "below"), true)
	wantRefused(t, "directory below a regular file", err, unix.ENOTDIR, file)
}

func TestOpenDirRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	inside := filepath.Join(root, "in")
	for _, d := range []string{outside, inside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	absLink := filepath.Join(inside, "abs")
	relLink := filepath.Join(inside, "rel")
	if err := os.Symlink(outside, absLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", relLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, component string
	}{
		{filepath.Join(absLink, "target"), absLink}, // parent is a link
		{filepath.Join(relLink, "a", "b"), relLink},
		{absLink, absLink}, // the target itself
		{relLink, relLink},
	} {
		for _, create := range []bool{false, true} {
			f, err := OpenDir(c.path, create)
			if err == nil {
				f.Close()
			}
			wantRefused(t, "OpenDir("+c.path+")", err, ErrSymlink, c.component)
		}
	}
	// The error says where the link points, so the manifest can name it.
	_, err := OpenDir(filepath.Join(absLink, "x"), true)
	if err == nil || !strings.Contains(err.Error(), "points to "+outside) {
		t.Errorf("error %v does not say where the link points", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("OpenDir created %v through a symlink", ents)
	}
}

func TestOpenBeneath(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "vol")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(vol, "logs", "app"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, to := range map[string]string{
		"abs":   outside,      // points out, absolute
		"rel":   "../outside", // points out, relative
		"inner": "logs",       // stays inside, but a link all the same
		"dots":  "logs/../../outside",
	} {
		if err := os.Symlink(to, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(vol, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := OpenDir(vol, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	for sub, want := range map[string]string{
		"logs":      filepath.Join(vol, "logs"),
		"logs/app/": filepath.Join(vol, "logs", "app"),
		"./logs":    filepath.Join(vol, "logs"),
		"":          vol,
		".":         vol,
	} {
		f, err := OpenBeneath(v, sub, false)
		if err != nil {
			t.Fatalf("OpenBeneath(%q): %v", sub, err)
		}
		if !sameFile(t, f, want) {
			t.Errorf("OpenBeneath(%q) is not %s", sub, want)
		}
		f.Close()
	}

	for _, c := range []struct {
		sub, names string
		err        error
	}{
		{"../..", `".."`, nil},
		{"..", `".."`, nil},
		{"logs/../../outside", `".."`, nil},
		{"logs/../app", `".."`, nil},
		{"/etc", "relative", nil},
		{outside, "relative", nil},
		{"abs", filepath.Join(vol, "abs"), ErrSymlink},
		{"rel", filepath.Join(vol, "rel"), ErrSymlink},
		{"rel/sub", filepath.Join(vol, "rel"), ErrSymlink},
		{"inner", filepath.Join(vol, "inner"), ErrSymlink},
		{"dots", filepath.Join(vol, "dots"), ErrSymlink},
		{"file", filepath.Join(vol, "file"), unix.ENOTDIR},
		{"missing", filepath.Join(vol, "missing"), os.ErrNotExist},
	} {
		for _, create := range []bool{false, true} {
			if c.err == os.ErrNotExist && create {
				continue
			}
			f, err := OpenBeneath(v, c.sub, create)
			if err == nil {
				f.Close()
			}
			wantRefused(t, "OpenBeneath("+c.sub+")", err, c.err, c.names)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("OpenBeneath created %v outside the volume", ents)
	}

	made, err := OpenBeneath(v, "new/dir", true)
	if err != nil {
		t.Fatal(err)
	}
	defer made.Close()
	if !sameFile(t, made, filepath.Join(vol, "new", "dir")) {
		t.Error("OpenBeneath with create opened another directory")
	}
}

func TestOpenFile(t *testing.T) {
	root := t.TempDir()
	img := filepath.Join(root, "disk.img")
	if err := os.WriteFile(img, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(img, filepath.Join(root, "link.img")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(img, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if n, err := f.Read(buf); err != nil || string(buf[:n]) != "image" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	f.Close()
	for _, c := range []struct{ path, component string }{
		{filepath.Join(root, "link.img"), filepath.Join(root, "link.img")},
		{filepath.Join(root, "dirlink", "disk.img"), filepath.Join(root, "dirlink")},
	} {
		f, err := OpenFile(c.path, unix.O_RDONLY)
		if err == nil {
			f.Close()
		}
		wantRefused(t, "OpenFile("+c.path+")", err, ErrSymlink, c.component)
	}
	if _, err := OpenFile(img, unix.O_RDWR|unix.O_CREAT); err == nil {
		t.Error("OpenFile with O_CREAT succeeded")
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		p, dir string
		want   bool
	}{
		{"/a", "/a", true},
		{"/a/b", "/a", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"/x", "/", true},
	} {
		if got := Within(tc.p, tc.dir); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.p, tc.dir, got, tc.want)
		}
	}
}
