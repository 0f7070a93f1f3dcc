package vm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// baseVersion is part of the base image's cache key: bump it when what
// goes into the image changes in a way its inputs' hash cannot see.
const baseVersion = "vm-base-6"

// The Debian packages the VM is made of; they are downloaded, never
// installed. linux-image-amd64 is only the metapackage: the versioned
// image it depends on is resolved with apt-cache.
var userPackages = []string{"open-iscsi", "libopeniscsiusr", "libisns0"}

// rootModules are loaded in the VM with their dependencies, in order.
// optionalModules may be absent from a kernel (or fail to load under TCG).
// lazyModules are in the image but loaded only when the kernel asks for
// them (a mount of that type): xfs alone would add a second to each boot.
var (
	lazyModules = []string{"xfs", "dm-crypt", "xts", "algif_skcipher"} // dm-crypt: the luks scenario modprobes it
	rootModules = []string{
		"configfs", "loop", "crc32c_generic", "ext4",
		"nvmet", "nvmet-tcp", "nvme-tcp", // NVMe/TCP target and host
		"target_core_mod", "target_core_file", "target_core_iblock", "iscsi_target_mod", // LIO
		"scsi_mod", "sd_mod", "iscsi_tcp", // open-iscsi's kernel half
		"veth",                                    // the flap scenario's storage link
		"virtio_pci", "virtio_blk", "virtio_scsi", // local disks by serial and WWN
		"nvme", // a local NVMe disk (the partition scenario)
	}
	optionalModules = []string{"crc32c-intel"}
)

// guestTools are host programs copied into the VM with their libraries:
// what volumed runs (mkfs, resize, blkid) and what the scenarios use
// beyond busybox (iproute2 for veth and network namespaces), and
// cryptsetup for drivers/luks.
var guestTools = []string{"mkfs.ext4", "resize2fs", "e2fsck", "blkid", "mkfs.xfs", "xfs_growfs", "ip", "cryptsetup"}

// dlopenedLibs are host libraries the guest tools load at run time.
var dlopenedLibs = []string{"libgcc_s.so.1"}

// kernelFiles is the extracted kernel: the image to boot and its modules.
type kernelFiles struct {
	version string // e.g. 6.1.0-56-amd64
	root    string // the extracted package; lib/modules/<version> under it
	boot    string // vmlinux when it could be extracted, else vmlinuz
	oi      string // the extracted open-iscsi packages
	debs    []string
}

// withCacheLock serialises preparation between concurrent test runs
// sharing one cache.
func withCacheLock(dir string, fn func() error) error {
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

func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// fetchDebs downloads the packages into cache/debs unless they are there.
func fetchDebs(ctx context.Context, cache string) ([]string, error) {
	dir := filepath.Join(cache, "debs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var want []string
	kernel, _ := filepath.Glob(filepath.Join(dir, "linux-image-[0-9]*.deb"))
	if len(kernel) == 0 {
		out, err := run(ctx, "", nil, "apt-cache", "depends", "linux-image-amd64")
		if err != nil {
			return nil, fmt.Errorf("resolve the kernel package (is `apt-get update` done?): %w", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: "); ok && strings.HasPrefix(name, "linux-image-") {
				want = append(want, name)
				break
			}
		}
		if len(want) == 0 {
			return nil, fmt.Errorf("apt-cache depends linux-image-amd64 names no versioned linux-image:\n%s", out)
		}
	}
	for _, p := range userPackages {
		if have, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb")); len(have) == 0 {
			want = append(want, p)
		}
	}
	if len(want) > 0 {
		args := append([]string{"download", "-q", "--"}, want...)
		if _, err := run(ctx, dir, nil, "apt-get", args...); err != nil {
			return nil, fmt.Errorf("download %v into %s: %w", want, dir, err)
		}
	}
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, err
	}
	slices.Sort(debs)
	return debs, nil
}

// extract unpacks debs into dir once; a stamp names what is in it.
func extract(ctx context.Context, dir string, debs []string) error {
	stamp := filepath.Join(dir, ".from")
	names := make([]string, len(debs))
	for i, d := range debs {
		names[i] = filepath.Base(d)
	}
	want := strings.Join(names, "\n")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range debs {
		if _, err := run(ctx, "", nil, "dpkg", "-x", d, dir); err != nil {
			return err
		}
	}
	return os.WriteFile(stamp, []byte(want), 0o644)
}

// prepareKernel downloads and extracts the kernel and open-iscsi, runs
// depmod on the kernel tree and extracts vmlinux for a faster boot.
func prepareKernel(ctx context.Context, cache string) (*kernelFiles, error) {
	debs, err := fetchDebs(ctx, cache)
	if err != nil {
		return nil, err
	}
	var kdebs, odebs []string
	for _, d := range debs {
		switch base := filepath.Base(d); {
		case strings.HasPrefix(base, "linux-image-amd64_"):
		case strings.HasPrefix(base, "linux-image-"):
			kdebs = append(kdebs, d)
		default:
			odebs = append(odebs, d)
		}
	}
	if len(kdebs) != 1 {
		return nil, fmt.Errorf("want one versioned linux-image .deb in %s, have %v (remove the stale ones)", filepath.Join(cache, "debs"), kdebs)
	}
	k := &kernelFiles{root: filepath.Join(cache, "kernel"), oi: filepath.Join(cache, "oi"), debs: debs}
	if err := extract(ctx, k.root, kdebs); err != nil {
		return nil, err
	}
	if err := extract(ctx, k.oi, odebs); err != nil {
		return nil, err
	}
	mods, err := filepath.Glob(filepath.Join(k.root, "lib/modules/*"))
	if err != nil || len(mods) != 1 {
		return nil, fmt.Errorf("want one lib/modules/<version> in %s, have %v", k.root, mods)
	}
	k.version = filepath.Base(mods[0])
	if _, err := os.Stat(filepath.Join(mods[0], "modules.dep")); err != nil {
		// The .deb ships no modules.dep; modprobe --show-depends needs it.
		if _, err := run(ctx, "", nil, "depmod", "-b", k.root, k.version); err != nil {
			return nil, err
		}
	}
	vmlinuz := filepath.Join(k.root, "boot", "vmlinuz-"+k.version)
	k.boot = vmlinuz
	vmlinux := filepath.Join(cache, "vmlinux-"+k.version)
	if _, err := os.Stat(vmlinux); err == nil {
		k.boot = vmlinux
	} else if err := extractVmlinux(ctx, vmlinuz, vmlinux); err == nil {
		k.boot = vmlinux
	}
	return k, nil
}

// extractVmlinux pulls the uncompressed kernel out of vmlinuz: it boots
// by PVH and skips the in-guest xz decompression, ~3 s of emulated CPU
// per boot. Go's library has no xz and busybox's lacks the x86 BCJ
// filter, so this needs python3; without it vmlinuz is booted.
func extractVmlinux(ctx context.Context, vmlinuz, vmlinux string) error {
	py, err := exec.LookPath("python3")
	if err != nil {
		return err
	}
	const script = `import lzma, sys
b = open(sys.argv[1], 'rb').read()
i = b.find(b'\xfd7zXZ\x00')
if i < 0: sys.exit('no xz payload')
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(b[i:])
if out[:4] != b'\x7fELF': sys.exit('payload is not ELF')
open(sys.argv[2], 'wb').write(out)
`
	tmp := vmlinux + ".tmp"
	if _, err := run(ctx, "", nil, py, "-c", script, vmlinuz, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, vmlinux)
}

// moduleOrder resolves the given modules and their dependencies,
// dependencies first, as paths relative to lib/modules/<version>.
func moduleOrder(ctx context.Context, k *kernelFiles, mods, optional []string) ([]string, error) {
	base := filepath.Join(k.root, "lib/modules", k.version) + "/"
	var order []string
	for _, m := range append(slices.Clone(mods), optional...) {
		out, err := run(ctx, "", nil, "modprobe", "-d", k.root, "-S", k.version, "--show-depends", m)
		if err != nil {
			if slices.Contains(optional, m) {
				continue
			}
			return nil, err
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "insmod" {
				continue // "builtin X"
			}
			rel := strings.TrimPrefix(f[1], base)
			if !slices.Contains(order, rel) {
				order = append(order, rel)
			}
		}
	}
	return order, nil
}

// hostTool finds a program on PATH or in the sbin directories, which a
// non-root PATH may lack.
func hostTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on PATH or in /usr/sbin, /sbin", name)
}

// staticBusybox finds busybox and checks it needs no libraries: it is
// the VM's shell and its every applet.
func staticBusybox() (string, error) {
	p, err := hostTool("busybox")
	if err != nil {
		return "", err
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("busybox at %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("busybox at %s is dynamically linked; install busybox-static", p)
		}
	}
	return p, nil
}

// libraries lists what ldd says bin needs: host path and path in the VM.
func libraries(ctx context.Context, bin, oiLib string) ([][2]string, error) {
	out, err := run(ctx, "", []string{"LD_LIBRARY_PATH=" + oiLib}, "ldd", bin)
	if err != nil {
		return nil, err
	}
	var libs [][2]string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			dst := filepath.Join(filepath.Dir(f[2]), f[0])
			if strings.HasPrefix(f[2], oiLib+"/") {
				dst = filepath.Join("/usr/lib/x86_64-linux-gnu", f[0])
			}
			libs = append(libs, [2]string{f[2], dst})
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"): // the dynamic loader
			libs = append(libs, [2]string{f[0], f[0]})
		case strings.Contains(line, "not found"):
			return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(line))
		}
	}
	return libs, nil
}

// baseInputs gathers what the base image is made of and a hash of it.
type baseInputs struct {
	busybox string
	tools   map[string]string // name in the VM -> host path
	modules []string          // loaded at boot, in this order
	lazy    []string          // only in the image
	key     string
}

func gatherBase(ctx context.Context, k *kernelFiles) (*baseInputs, error) {
	in := &baseInputs{tools: map[string]string{
		"iscsid":   filepath.Join(k.oi, "sbin/iscsid"),
		"iscsiadm": filepath.Join(k.oi, "sbin/iscsiadm"),
	}}
	var err error
	if in.busybox, err = staticBusybox(); err != nil {
		return nil, err
	}
	for _, name := range guestTools {
		if in.tools[name], err = hostTool(name); err != nil {
			return nil, err
		}
	}
	if in.modules, err = moduleOrder(ctx, k, rootModules, optionalModules); err != nil {
		return nil, err
	}
	lazy, err := moduleOrder(ctx, k, lazyModules, nil)
	if err != nil {
		return nil, err
	}
	for _, m := range lazy {
		if !slices.Contains(in.modules, m) {
			in.lazy = append(in.lazy, m)
		}
	}
	h := sha256.New()
	fmt.Fprintln(h, baseVersion, k.version, strings.Join(in.modules, " "), strings.Join(in.lazy, " "))
	for _, d := range k.debs {
		fmt.Fprintln(h, filepath.Base(d))
	}
	names := append([]string{"busybox"}, keys(in.tools)...)
	for _, name := range names {
		p := in.busybox
		if name != "busybox" {
			p = in.tools[name]
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(h, name, p, fi.Size(), fi.ModTime().UnixNano())
	}
	in.key = hex.EncodeToString(h.Sum(nil))[:16]
	return in, nil
}

func keys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// baseImage returns the cached base initramfs, building it if its
// inputs changed: busybox, kernel modules (with a load-order file and
// depmod's index, so the kernel's own module requests work too),
// open-iscsi, e2fsprogs, xfsprogs, blkid and iproute2 with their
// libraries, and the open-iscsi configuration. /init, volumed and the
// scenarios are not in it: they ride in a second archive per run.
func baseImage(ctx context.Context, cache string, k *kernelFiles) (string, error) {
	in, err := gatherBase(ctx, k)
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, "base-"+in.key+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	stage, err := os.MkdirTemp(cache, "stage-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	if err := stageModules(ctx, k, in.modules, in.lazy, stage); err != nil {
		return "", err
	}

	var buf bytes.Buffer
	c := newCPIO(&buf)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "usr/local/sbin", "proc", "sys", "dev", "run", "tmp", "w",
		"etc/iscsi", "var/lib/iscsi", "var/lock", "lib64", "lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"} {
		c.dir(d)
	}
	c.symlink("var/run", "/run")
	c.charDev("dev/console", 0o600, 5, 1)
	c.charDev("dev/null", 0o666, 1, 3)
	c.copyFile("bin/busybox", in.busybox, 0o755)
	seen := map[string]bool{}
	for _, name := range keys(in.tools) {
		src := in.tools[name]
		c.copyFile("usr/local/sbin/"+name, src, 0o755)
		libs, err := libraries(ctx, src, filepath.Join(k.oi, "usr/lib/x86_64-linux-gnu"))
		if err != nil {
			return "", err
		}
		for _, l := range libs {
			if !seen[l[1]] {
				seen[l[1]] = true
				c.copyFile(l[1], l[0], 0o755)
			}
		}
	}
	// glibc dlopens libgcc_s when a thread exits (cryptsetup's argon2
	// threads); ldd cannot name it.
	for _, lib := range dlopenedLibs {
		dst := filepath.Join("/lib/x86_64-linux-gnu", lib)
		if !seen[dst] {
			c.copyFile(dst, dst, 0o755)
		}
	}
	if _, err := os.Stat("/etc/mke2fs.conf"); err == nil {
		c.copyFile("etc/mke2fs.conf", "/etc/mke2fs.conf", 0o644)
	}
	conf, err := iscsidConf(filepath.Join(k.oi, "etc/iscsi/iscsid.conf"))
	if err != nil {
		return "", err
	}
	c.file("etc/iscsi/iscsid.conf", 0o600, conf)
	c.file("etc/iscsi/initiatorname.iscsi", 0o644, []byte("InitiatorName=iqn.2024-01.io.example:vmtest-initiator\n"))
	c.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	c.file("etc/group", 0o644, []byte("root:x:0:\n"))
	c.file("etc/hostname", 0o644, []byte("vmtest\n"))
	err = filepath.Walk(stage, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == stage {
			return err
		}
		rel := strings.TrimPrefix(p, stage)
		if fi.IsDir() {
			c.dir(rel)
		} else {
			c.copyFile(rel, p, 0o644)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if err := c.close(); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(cache, "base-*.cpio*"))
	for _, o := range old {
		os.Remove(o)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// stageModules lays out the modules under stage/lib/modules/<version>
// with a load-order file (of those loaded at boot) and runs depmod on
// that tree, so the kernel's own requests for the others work.
func stageModules(ctx context.Context, k *kernelFiles, modules, lazy []string, stage string) error {
	src := filepath.Join(k.root, "lib/modules", k.version)
	dst := filepath.Join(stage, "lib/modules", k.version)
	for _, rel := range append(slices.Clone(modules), lazy...) {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"modules.builtin", "modules.builtin.modinfo", "modules.order"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "lib/modules/load-order"), []byte(strings.Join(modules, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	_, err := run(ctx, "", nil, "depmod", "-b", stage, k.version)
	return err
}

// iscsidConf adapts Debian's iscsid.conf to a VM without systemd:
// iscsid is started by /init, and volumed logs in itself.
func iscsidConf(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "iscsid.startup"):
			line = "# " + line
		case strings.HasPrefix(line, "node.startup"):
			line = "node.startup = manual"
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes(), sc.Err()
}

// prepare makes the kernel and base image, under the cache lock.
func prepare(ctx context.Context, cache string) (*kernelFiles, string, error) {
	var k *kernelFiles
	var base string
	err := withCacheLock(cache, func() error {
		var err error
		if k, err = prepareKernel(ctx, cache); err != nil {
			return err
		}
		if base, err = baseImage(ctx, cache, k); err != nil {
			return fmt.Errorf("base initramfs: %w", err)
		}
		return nil
	})
	return k, base, err
}
