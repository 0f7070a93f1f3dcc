package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/safepath"
)

// noMountUnder fails the test if anything is mounted at or below dir.
func noMountUnder(t *testing.T, dir string) {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("mounted under %s: %s (%s from %s)", dir, m.Mountpoint, m.FSType, m.Source)
	}
}

// mountedAt reports whether a mount's root is exactly at p, by statx.
func mountedAt(t *testing.T, p string) bool {
	t.Helper()
	pt, err := At(p)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return pt.Root
}

func openDir(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := safepath.OpenDir(p, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestSafeMountDevice(t *testing.T) {
	dev := loopImage(t)
	root := t.TempDir()
	target := filepath.Join(root, "staging", "data") // parents are missing
	cleanupMounts(t, target)

	if err := SafeMountDevice(dev, target, "ext4", []string{"noatime", "nodev", "errors=remount-ro", "commit=30", "nofail"}); err != nil {
		t.Fatal(err)
	}
	if !mountedAt(t, target) {
		t.Fatalf("statx: nothing mounted at %s", target)
	}
	m, err := Lookup(target)
	if err != nil || m == nil || m.FSType != "ext4" || m.Source != dev {
		t.Fatalf("Lookup = %+v, %v; want ext4 from %s", m, err, dev)
	}
	if opts := optionSet(m); !slices.Contains(opts, "noatime") || !slices.Contains(opts, "nodev") || !slices.Contains(opts, "rw") {
		t.Errorf("mount options %q lack rw,noatime,nodev", m.Options)
	}
	for _, want := range []string{"errors=remount-ro", "commit=30"} {
		if !slices.Contains(strings.Split(m.VFSOptions, ","), want) {
			t.Errorf("superblock options %q lack %s", m.VFSOptions, want)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(context.Background(), target); err != nil {
		t.Fatal(err)
	}

	// Read-only and a propagation option, onto a descriptor.
	if err := MountDeviceAt(dev, openDir(t, target), "ext4", []string{"ro", "shared"}); err != nil {
		t.Fatal(err)
	}
	m, err = Lookup(target)
	if err != nil || m == nil {
		t.Fatalf("Lookup after the ro mount = %+v, %v", m, err)
	}
	if !slices.Contains(optionSet(m), "ro") || !strings.Contains(m.Optional, "shared:") {
		t.Errorf("ro,shared mount has options %q, optional fields %q", m.Options, m.Optional)
	}
	if got, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(got) != "x" {
		t.Errorf("file written before not readable on the ro mount: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(target, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write on the ro mount: %v, want EROFS", err)
	}
	if err := Unmount(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	noMountUnder(t, root)
}

// A mount that fails (bad options, a filesystem not on the device, a
// target that is not a directory) leaves nothing mounted and names the
// target.
func TestSafeMountDeviceRefuses(t *testing.T) {
	dev := loopImage(t)
	root := t.TempDir()
	target := filepath.Join(root, "staging", "data")
	cleanupMounts(t, target)

	for _, c := range []struct {
		name, fstype string
		opts         []string
		says         string
	}{
		{"unknown option", "ext4", []string{"noatime", "bogus_opt=1"}, "bogus_opt"},
		{"unknown flag option", "ext4", []string{"no_such_flag"}, "no_such_flag"},
		{"bad value", "ext4", []string{"errors=sometimes"}, "errors=sometimes"},
		{"bind on a device", "ext4", []string{"bind"}, "bind"},
		{"unknown filesystem", "nosuchfs", nil, "nosuchfs"},
		{"wrong filesystem", "xfs", nil, "xfs"},
	} {
		err := SafeMountDevice(dev, target, c.fstype, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), target) {
			t.Errorf("%s: err = %v, want one naming %s and the target", c.name, err, c.says)
		}
		if mountedAt(t, target) {
			t.Fatalf("%s: something is mounted at %s after an error", c.name, target)
		}
	}

	// A target that is, or is below, a regular file is refused.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{file, filepath.Join(file, "data")} {
		if err := SafeMountDevice(dev, bad, "ext4", nil); !errors.Is(err, unix.ENOTDIR) || !strings.Contains(err.Error(), file) {
			t.Errorf("SafeMountDevice onto %s = %v, want ENOTDIR naming %s", bad, err, file)
		}
	}
	noMountUnder(t, root)
}

func TestSafeMountDeviceRefusesSymlinkedTarget(t *testing.T) {
	dev := loopImage(t)
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupMounts(t, outside)
	link := filepath.Join(root, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{filepath.Join(link, "data"), link} {
		err := SafeMountDevice(dev, target, "ext4", nil)
		if !errors.Is(err, safepath.ErrSymlink) || !strings.Contains(err.Error(), link) {
			t.Errorf("SafeMountDevice on %s = %v, want a refusal naming %s", target, err, link)
		}
	}
	noMountUnder(t, outside)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("directories created through the link: %v", ents)
	}
}

func TestSafeBindSubPath(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	st := tmpfs(t, staging, 0)
	outside := filepath.Join(root, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupMounts(t, outside)
	if err := os.WriteFile(filepath.Join(outside, "secret"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(staging, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "logs", "app.log"), []byte("log"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, to := range map[string]string{"abs": outside, "rel": "../outside", "inner": "logs"} {
		if err := os.Symlink(to, filepath.Join(staging, name)); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(root, "pub", "logs")
	cleanupMounts(t, target)

	for _, sub := range []string{"../..", "..", "logs/../../outside", "/", outside, "abs", "rel", "rel/x", "inner", "missing"} {
		if err := SafeBind(staging, sub, target, BindOptions{}); err == nil || !strings.Contains(err.Error(), "subPath") {
			t.Errorf("SafeBind with subPath %q = %v, want a subPath refusal", sub, err)
		}
		if mountedAt(t, target) {
			t.Fatalf("subPath %q: mounted at %s after an error", sub, target)
		}
	}
	noMountUnder(t, outside)

	if err := SafeBind(staging, "logs", target, BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "app.log")); err != nil || string(got) != "log" {
		t.Fatalf("subPath content at the target: %q, %v", got, err)
	}
	m, err := Lookup(target)
	if err != nil || !SameSource(m, st, "logs") {
		t.Fatalf("bind of subPath logs: %+v, %v; want the staging mount's /logs", m, err)
	}

	// A missing source is refused before the target is created.
	other := filepath.Join(root, "other")
	if err := SafeBind(filepath.Join(root, "missing"), "", other, BindOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("SafeBind of a missing source = %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target created for a missing source: %v", err)
	}

	// The source and the target's parents are refused when they are links.
	stLink := filepath.Join(root, "staging-link")
	if err := os.Symlink(staging, stLink); err != nil {
		t.Fatal(err)
	}
	if err := SafeBind(stLink, "", other, BindOptions{}); !errors.Is(err, safepath.ErrSymlink) {
		t.Errorf("SafeBind from a symlinked source = %v, want ErrSymlink", err)
	}
	outLink := filepath.Join(root, "out-link")
	if err := os.Symlink(outside, outLink); err != nil {
		t.Fatal(err)
	}
	if err := SafeBind(staging, "", filepath.Join(outLink, "t"), BindOptions{}); !errors.Is(err, safepath.ErrSymlink) {
		t.Errorf("SafeBind onto a target below a link = %v, want ErrSymlink", err)
	}
	noMountUnder(t, outside)
	if _, err := os.Lstat(filepath.Join(outside, "t")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target directory created through the link: %v", err)
	}
}

func TestBindAtFlags(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	tmpfs(t, staging, 0)
	src := openDir(t, staging)
	rw, ro := filepath.Join(root, "rw"), filepath.Join(root, "ro")
	cleanupMounts(t, rw)
	cleanupMounts(t, ro)
	if err := BindAt(src, openDir(t, rw), BindOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := BindAt(src, openDir(t, ro), BindOptions{ReadOnly: true, NoSuid: true, NoDev: true, NoExec: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rw, "via-rw"), []byte("data"), 0o644); err != nil {
		t.Fatalf("write through the rw bind: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(ro, "via-rw")); err != nil || string(got) != "data" {
		t.Fatalf("read through the ro bind = %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "via-ro"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the ro bind: %v, want EROFS", err)
	}
	wantStatfs(t, ro, unix.ST_RDONLY|unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC, 0)
	wantStatfs(t, rw, 0, unix.ST_RDONLY|unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC)

	// The mount table shows both binds as the staging mount's.
	tbl, err := ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	roM, rwM, stM := tbl.Top(ro), tbl.Top(rw), tbl.Top(staging)
	if roM == nil || rwM == nil || stM == nil {
		t.Fatalf("Top: ro %+v, rw %+v, staging %+v; want all three mounted", roM, rwM, stM)
	}
	if !slices.Contains(optionSet(roM), "ro") || !slices.Contains(optionSet(rwM), "rw") {
		t.Errorf("mount options: ro bind %q, rw bind %q", roM.Options, rwM.Options)
	}
	if !SameSource(roM, stM, "") || !SameSource(rwM, stM, "") {
		t.Errorf("SameSource false for binds of the staging mount: %+v %+v %+v", roM, rwM, stM)
	}
	if tbl.ByID(roM.ID) != roM || !slices.Contains(tbl.All(), roM) {
		t.Errorf("ByID/All do not index the ro bind")
	}

	// A nosuid,nodev source stays so in a bind that asked only for ro.
	nosuid := filepath.Join(root, "nosuid-staging")
	tmpfs(t, nosuid, unix.MS_NOSUID|unix.MS_NODEV)
	inherit := filepath.Join(root, "inherit")
	cleanupMounts(t, inherit)
	if err := BindAt(openDir(t, nosuid), openDir(t, inherit), BindOptions{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	wantStatfs(t, inherit, unix.ST_RDONLY|unix.ST_NOSUID|unix.ST_NODEV, unix.ST_NOEXEC)
}

// repeat runs act over and over in a goroutine until the returned stop
// is called; stop waits for the goroutine to end.
func repeat(act func()) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			act()
		}
	})
	return func() { close(done); wg.Wait() }
}

func wantStatfs(t *testing.T, p string, set, clear uint64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	if f := uint64(st.Flags); f&set != set || f&clear != 0 {
		t.Errorf("statfs(%s) flags %#x: want %#x set and %#x clear", p, f, set, clear)
	}
}

// A read-only bind must be read-only the moment it appears: a writer
// hammering the target while the bind is made must never get a file
// into the source. (A bind followed by a read-only remount has a window.)
func TestBindAtReadOnlyFromTheStart(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	tmpfs(t, staging, 0)
	src := openDir(t, staging)
	target := filepath.Join(root, "ro")
	tfd := openDir(t, target)
	cleanupMounts(t, target)
	probe := filepath.Join(target, "probe")

	for i := range 200 {
		stop := repeat(func() {
			if fd, err := unix.Open(probe, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(fd)
			}
		})
		err := BindAt(src, tfd, BindOptions{ReadOnly: true})
		stop()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(staging, "probe")); err == nil {
			t.Fatalf("iteration %d: a write got through the read-only bind", i)
		}
		if err := Unmount(context.Background(), target); err != nil {
			t.Fatal(err)
		}
	}
}

// The target is swapped with a symlink to a directory outside, over and
// over, while it is opened and mounted on: the mount must land on the
// real directory or not at all, never through the link.
func TestBindAtTargetSwappedForSymlink(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	tmpfs(t, staging, 0)
	if err := os.WriteFile(filepath.Join(staging, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src := openDir(t, staging)
	outside := filepath.Join(root, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupMounts(t, outside)

	var mounted, refused int
	for i := range 500 {
		dir := filepath.Join(root, "race", strconv.Itoa(i))
		real, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
		if err := os.MkdirAll(real, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		// Fails with EBUSY once the real directory is a mount point.
		stop := repeat(func() { _ = unix.Renameat2(unix.AT_FDCWD, real, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE) })
		f, err := safepath.OpenDir(real, false)
		if err == nil {
			bindErr := BindAt(src, f, BindOptions{})
			f.Close()
			if bindErr != nil {
				stop()
				t.Fatalf("iteration %d: BindAt: %v", i, bindErr)
			}
		}
		stop()
		switch {
		case err == nil:
			mounted++
		case errors.Is(err, safepath.ErrSymlink):
			refused++
		default:
			t.Fatalf("iteration %d: OpenDir: %v", i, err)
		}

		if mountedAt(t, outside) {
			t.Fatalf("iteration %d: mounted through the symlink onto %s", i, outside)
		}
		// Wherever the real directory is now, the mount is on it.
		at := real
		if fi, lerr := os.Lstat(real); lerr != nil || !fi.IsDir() {
			at = link
		}
		if got := mountedAt(t, at); got != (err == nil) {
			t.Fatalf("iteration %d: mounted on the real directory = %v, want %v", i, got, err == nil)
		}
		if err == nil {
			if _, serr := os.Stat(filepath.Join(at, "marker")); serr != nil {
				t.Fatalf("iteration %d: mount on the real directory is not the source: %v", i, serr)
			}
			if uerr := Unmount(context.Background(), at); uerr != nil {
				t.Fatal(uerr)
			}
		}
	}
	noMountUnder(t, outside)
	t.Logf("%d mounted on the real directory, %d refused while it was the symlink", mounted, refused)
}
