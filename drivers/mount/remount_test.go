package mount

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func hasOpt(t *testing.T, dir, opt string) bool {
	t.Helper()
	m, err := Lookup(dir)
	if err != nil || m == nil {
		t.Fatalf("Lookup(%s) = %v, %v", dir, m, err)
	}
	return slices.Contains(optionSet(m), opt)
}

// A bind's flags are set and cleared in place, the source mount is
// left as it is, and a mount other than the one named is not touched.
func TestSetBindOptions(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	tmpfs(t, src, 0)
	if err := SafeBind(src, "", dst, BindOptions{NoSuid: true}); err != nil {
		t.Fatal(err)
	}
	cleanupMounts(t, dst)
	m, _ := Lookup(dst)

	if err := SetBindOptions(dst, m.ID, BindOptions{ReadOnly: true, NoDev: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "f"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through a bind made read-only: %v, want EROFS", err)
	}
	if !hasOpt(t, dst, "nodev") || hasOpt(t, dst, "nosuid") {
		t.Errorf("dst options %v, want nodev set and nosuid cleared", optionSet(m))
	}
	if hasOpt(t, src, "ro") {
		t.Error("the source mount became read-only too")
	}
	if err := SetBindOptions(dst, m.ID, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "f"), nil, 0o600); err != nil {
		t.Errorf("write after clearing read-only: %v", err)
	}
	if err := SetBindOptions(dst, m.ID+1000, BindOptions{ReadOnly: true}); !errors.Is(err, ErrNotThatMount) {
		t.Errorf("SetBindOptions on another mount ID: %v, want ErrNotThatMount", err)
	}
}

// Remount changes what the filesystem can change live and returns its
// refusal otherwise, wrapped.
func TestRemount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	m := tmpfs(t, dir, 0)
	if err := Remount(dir, m.ID, nil, []string{"noexec", "nosuid", "size=16m"}); err != nil {
		t.Fatal(err)
	}
	if !hasOpt(t, dir, "noexec") || !hasOpt(t, dir, "nosuid") {
		t.Error("remount did not set noexec,nosuid")
	}
	if err := Remount(dir, m.ID, []string{"noexec"}, []string{"nosuid"}); err != nil {
		t.Fatal(err)
	}
	if hasOpt(t, dir, "noexec") {
		t.Error("noexec stayed after a remount without it")
	}
	if err := Remount(dir, m.ID, nil, []string{"no-such-option"}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("remount with an unknown option: %v, want EINVAL", err)
	}
	err := Remount(dir, m.ID, []string{"size=16m", "nosuid"}, []string{"nosuid"})
	if !errors.Is(err, unix.EOPNOTSUPP) || !strings.Contains(err.Error(), "size=16m cannot be dropped") {
		t.Errorf("remount dropping size=16m: %v, want EOPNOTSUPP naming it", err)
	}
	if err := Remount(dir, m.ID+1000, nil, nil); !errors.Is(err, ErrNotThatMount) {
		t.Errorf("remount of another mount ID: %v, want ErrNotThatMount", err)
	}
}

func TestEntries(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", ".hidden"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Entries(dir); n != 3 || err != nil {
		t.Errorf("Entries = %d, %v; want 3", n, err)
	}
	if n, err := Entries(filepath.Join(dir, "missing")); n != 0 || err != nil {
		t.Errorf("Entries(missing) = %d, %v; want 0", n, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Entries(link); err == nil {
		t.Error("Entries followed a symlink")
	}
}
