package ostest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testtool"
)

// imageVersion is part of the cache key: bump it when what goes into the
// image changes in a way the hashed inputs cannot see.
const imageVersion = "os-base-1"

// Packages is what the base image holds besides Debian's minbase: one
// image serves every test of the tier, so it has what each needs (LUKS,
// iSCSI initiator, NVMe tools, LVM and dm, partitioning, ifupdown for a
// network that goes down at shutdown, Tang's server for TestTang: tang-common,
// not tang, whose socket unit would serve port 80 on every machine).
var Packages = []string{
	"systemd", "systemd-sysv", "udev", "kmod", "linux-image-cloud-amd64", "initramfs-tools",
	"e2fsprogs", "xfsprogs", "btrfs-progs", "util-linux", "iproute2", "ifupdown",
	"cryptsetup-bin", "open-iscsi", "nvme-cli", "lvm2", "dmsetup", "thin-provisioning-tools",
	"dosfstools", "fdisk", "gdisk", "tang-common",
}

// baseVersion is the version of the package in the base image; newer
// builds (Deb) sort after it.
const baseVersion = "v0.1.0"

// Image is the base image: a Debian 12 root filesystem (raw ext4) with the
// package installed, its kernel and initramfs. It is never written to:
// each Machine boots a copy-on-write overlay of Disk.
type Image struct {
	Dir    string // the cache entry
	Kernel string
	Initrd string
	Disk   string
	Root   string // the repository
	Key    string // the cache key: hash of the .deb and the recipe

	work  string        // a temp dir of this test binary (debs)
	slots chan struct{} // VMs that may run at once
	cpu   vmCPU         // what each test's VMs cost
	accel string
	smp   int
	mem   int
}

var (
	baseOnce sync.Once
	base     *Image
	baseErr  error
)

// Base returns the base image, building it (or taking it from the cache)
// once per test binary. A missing tool fails the test under make test and
// skips it elsewhere (testtool.Missing); -short skips it.
func Base(t testing.TB) *Image {
	t.Helper()
	if testing.Short() {
		t.Skip("boots qemu VMs, which -short asks to leave out (make test and CI never pass -short)")
	}
	if os.Geteuid() != 0 {
		testtool.Missing(t, "root (mmdebstrap and mkfs.ext4 -d build the image as root)", "run as root", fmt.Errorf("euid %d", os.Geteuid()))
	}
	for _, tool := range [][2]string{
		{"mmdebstrap", "mmdebstrap"}, {"qemu-system-x86_64", "qemu-system-x86"}, {"qemu-img", "qemu-utils"},
		{"mkfs.ext4", "e2fsprogs"}, {"e2fsck", "e2fsprogs"}, {"debugfs", "e2fsprogs"}, {"journalctl", "systemd"},
	} {
		if _, err := lookTool(tool[0]); err != nil {
			testtool.Missing(t, tool[0], "Debian package "+tool[1]+", see scripts/deps.sh", err)
		}
	}
	baseOnce.Do(func() { base, baseErr = buildBase() })
	if baseErr != nil {
		t.Fatalf("the base OS image: %v", baseErr)
	}
	return base
}

// lookTool finds a program in PATH or the sbin directories.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not in PATH, /usr/sbin or /sbin", name)
}

func buildBase() (*Image, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	// Lives as long as the test binary (TestMain removes it).
	work, err := os.MkdirTemp("", "ostest-")
	if err != nil {
		return nil, err
	}
	img := &Image{Root: root, work: work, accel: cmp.Or(os.Getenv("VOLUMED_OS_ACCEL"), "tcg"), mem: 1024}
	// One VM per CPU, and one more: some tests leave their VM idle for
	// a while on purpose (a disk delayed by dm-delay, an operation's
	// timeout, a bounded shutdown), and the third takes that CPU.
	parallel := runtime.NumCPU() + 1
	img.slots = make(chan struct{}, parallel)
	img.smp = max(1, runtime.NumCPU()/parallel)

	deb, err := img.Deb(ctx, baseVersion)
	if err != nil {
		return nil, err
	}
	key, err := cacheKey(deb, filepath.Join(root, "test/os"))
	if err != nil {
		return nil, err
	}
	cache := cmp.Or(os.Getenv("VOLUMED_OS_CACHE"), filepath.Join(root, ".cache/os"))
	img.Key = key
	img.Dir = filepath.Join(cache, "base-"+key[:16])
	img.Kernel, img.Initrd, img.Disk = filepath.Join(img.Dir, "vmlinuz"), filepath.Join(img.Dir, "initrd"), filepath.Join(img.Dir, "disk.img")
	err = withLock(cache, func() error {
		prune(cache, img.Dir)
		done := filepath.Join(img.Dir, ".done")
		if _, err := os.Stat(done); err == nil {
			now := time.Now()
			return os.Chtimes(done, now, now) // in use: see prune
		}
		return buildImage(ctx, root, img.Dir, deb)
	})
	return img, err
}

// prune removes the cached images no run has used for a day (each change
// of the package makes a new one, of about 600 MB); keep is the one this
// run uses. Runs of other trees sharing the cache keep theirs by using them.
func prune(cache, keep string) {
	dirs, _ := filepath.Glob(filepath.Join(cache, "base-*"))
	for _, d := range dirs {
		st, err := os.Stat(filepath.Join(d, ".done"))
		if d == keep || (err == nil && time.Since(st.ModTime()) < 24*time.Hour) {
			continue
		}
		if err != nil && !strings.HasSuffix(d, ".tmp") {
			continue // being built (under the lock, so not now) or foreign
		}
		os.RemoveAll(d)
	}
}

// buildImage runs build-image.sh into a fresh dir and renames it into
// place: a half-built image is never taken for a cached one.
func buildImage(ctx context.Context, root, dir, deb string) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	here := filepath.Join(root, "test/os")
	init := filepath.Join(tmp, "init")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", init, "./test/os/guest")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build the initramfs's init: %w\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(here, "build-image.sh"), tmp, deb, strings.Join(Packages, ","), filepath.Join(here, "guest"), init)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("build-image.sh: %w\n%s", err, lastN(string(out), 30))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), nil, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// cacheKey hashes the .deb, the recipe (build-image.sh and guest/) and
// the package list: any change builds a new image.
func cacheKey(deb, here string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", imageVersion, strings.Join(Packages, ","))
	files := []string{deb, filepath.Join(here, "build-image.sh")}
	guest, err := filepath.Glob(filepath.Join(here, "guest", "*"))
	if err != nil {
		return "", err
	}
	slices.Sort(guest)
	for _, f := range append(files, guest...) {
		fh, err := os.Open(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n", filepath.Base(f))
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Deb builds the package (make package, .deb only) from this tree with
// the given version ("v0.2.0"): the binary says it (volumed version) and
// the package carries it. The same tree and version give the same bytes
// (SOURCE_DATE_EPOCH), so the image cache keeps.
func (img *Image) Deb(ctx context.Context, version string) (string, error) {
	dir := filepath.Join(img.work, "deb-"+version)
	if debs, _ := filepath.Glob(filepath.Join(dir, "*.deb")); len(debs) == 1 {
		return debs[0], nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "volumed")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/volumed")
	build.Dir = img.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build volumed %s: %w\n%s", version, err, out)
	}
	if err := os.Chtimes(bin, time.Unix(0, 0), time.Unix(0, 0)); err != nil {
		return "", err
	}
	pkg := exec.CommandContext(ctx, "make", "--no-print-directory", "package", "PACKAGERS=deb",
		"VERSION="+version, "PACKAGE_BIN="+bin, "DIST="+dir)
	pkg.Dir = img.Root
	pkg.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
	if out, err := pkg.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make package %s: %w\n%s", version, err, out)
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil || len(debs) != 1 {
		return "", fmt.Errorf("make package left %v in %s, want one .deb", debs, dir)
	}
	return debs[0], nil
}

// withLock serialises image builds between test runs sharing a cache.
func withLock(dir string, fn func() error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return fn()
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no go.mod above %s", dir)
}

// lastN is the last n lines of s.
func lastN(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestImageHoldsThePackage builds (or finds cached) the base image and
// checks that it boots this tree's package: kernel, initrd and disk are
// there and the disk holds the agent and its unit. `make test` runs it
// beside the race and VM tests so that the tier after them finds the
// image built.
func TestImageHoldsThePackage(t *testing.T) {
	img := Base(t)
	for _, f := range []string{img.Kernel, img.Initrd, img.Disk} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("image file %s: %v (empty or missing)", f, err)
		}
	}
	debugfs, err := lookTool("debugfs")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/usr/bin/volumed", "/usr/lib/systemd/system/volumed.service"} {
		out, err := exec.Command(debugfs, "-R", "stat "+p, img.Disk).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Type: regular") {
			t.Errorf("%s is not in the image: %v: %s", p, err, lastN(string(out), 5))
		}
	}
}
