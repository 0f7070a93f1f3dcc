package blockfs

import (
	"context"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The probe reads around the page cache: what it cached was dropped
// again by the mount that follows (it sets the device's block size), and
// probe plus mount of a loop device took two to three times the mount
// alone. It still finds the filesystem.
func TestProbeDeviceLeavesNoPageCache(t *testing.T) {
	need(t, "mkfs.ext4")
	img := image(t, "probe.img", 16*mib)
	runCmd(t, "", "mkfs.ext4", "-q", "-F", img)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 64*kib, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(m); err != nil {
			t.Error(err)
		}
	}()
	resident := func() int {
		vec := make([]byte, 64*kib/os.Getpagesize())
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if n := resident(); n != 0 {
		t.Fatalf("%d pages still cached before the probe", n)
	}
	// As the agent asks: blkid, which reads through the cache, only for
	// what looks blank.
	sigs, err := ProbeDeviceWith(context.Background(), img, ProbeOptions{BlkidOnlyIfBlank: true})
	if err != nil || len(sigs) == 0 || sigs[0].Type != "ext4" {
		t.Fatalf("ProbeDevice = %+v, %v; want ext4", sigs, err)
	}
	if n := resident(); n != 0 {
		t.Errorf("%d pages of the probed first 64 KiB are in the page cache; want the probe to read around it", n)
	}
}
