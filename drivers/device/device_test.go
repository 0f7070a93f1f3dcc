package device

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/loop"
)

const mib = 1 << 20

// fixture is a FAKE sysfs and /dev under a temp dir, laid out as a 6.x
// kernel lays out disks this machine's kernel does not have (virtio with
// a serial, NVMe, SCSI, dm-multipath). Device nodes are real block nodes
// made with mknod, never opened.
type fixture struct {
	t        *testing.T
	sys, dev string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	x := &fixture{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev")}
	for _, d := range []string{filepath.Join(x.sys, "block"), filepath.Join(x.sys, "dev", "block"), x.dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

func (x *fixture) finder() Finder { return Finder{SysRoot: x.sys, DevRoot: x.dev} }

// disk adds sysfs entry block/<name> for a whole disk of 2048 sectors and,
// when node is set, its /dev node. files are extra attributes by path
// relative to the disk's directory.
func (x *fixture) disk(name string, major, minor uint32, node bool, files map[string]string) string {
	x.t.Helper()
	dir := filepath.Join(x.sys, "block", name)
	base := map[string]string{
		"dev":    strconv.Itoa(int(major)) + ":" + strconv.Itoa(int(minor)) + "\n",
		"size":   "2048\n",
		"uevent": "MAJOR=" + strconv.Itoa(int(major)) + "\nMINOR=" + strconv.Itoa(int(minor)) + "\nDEVNAME=" + name + "\nDEVTYPE=disk\n",
	}
	for k, v := range files {
		base[k] = v
	}
	x.write(dir, base)
	if node {
		x.node(name, major, minor)
	}
	return dir
}

func (x *fixture) write(dir string, files map[string]string) {
	x.t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			x.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			x.t.Fatal(err)
		}
	}
}

func (x *fixture) node(name string, major, minor uint32) string {
	x.t.Helper()
	p := filepath.Join(x.dev, name)
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		x.t.Fatalf("mknod %s: %v", p, err)
	}
	return p
}

// vpd80 builds a SCSI unit serial number page.
func vpd80(serial string) string {
	return string([]byte{0, 0x80, 0, byte(len(serial))}) + serial
}

// vpd83 builds a device identification page from descriptors.
func vpd83(descs ...[]byte) string {
	var body []byte
	for _, d := range descs {
		body = append(body, d...)
	}
	return string(append([]byte{0, 0x83, byte(len(body) >> 8), byte(len(body))}, body...))
}

// desc builds one designation descriptor.
func desc(codeSet, assoc, typ byte, v []byte) []byte {
	return append([]byte{codeSet, assoc<<4 | typ, 0, byte(len(v))}, v...)
}

func mustFind(t *testing.T, f Finder, s Selector) Disk {
	t.Helper()
	d, ok, err := f.Find(s)
	if err != nil || !ok {
		t.Fatalf("Find(%+v) = %+v, %v, %v; want found", s, d, ok, err)
	}
	return d
}

func mustNotFind(t *testing.T, f Finder, s Selector) {
	t.Helper()
	d, ok, err := f.Find(s)
	if err != nil || ok {
		t.Fatalf("Find(%+v) = %+v, %v, %v; want not found, no error", s, d, ok, err)
	}
}

func mustFail(t *testing.T, f Finder, s Selector, want string) {
	t.Helper()
	d, ok, err := f.Find(s)
	if err == nil || ok || !strings.Contains(err.Error(), want) {
		t.Fatalf("Find(%+v) = %+v, %v, %v; want error containing %q", s, d, ok, err, want)
	}
}

func TestFixtureVirtioSerial(t *testing.T) {
	x := newFixture(t)
	// virtio_blk prints the serial without a newline; QEMU pads with NULs.
	x.disk("vdb", 252, 16, true, map[string]string{"serial": "VOL 123\x00\x00", "device/vendor": "0x1af4\n"})
	x.disk("vdc", 252, 32, true, map[string]string{"serial": "VOL 1234"})
	x.disk("loop0", 7, 0, true, nil)
	f := x.finder()

	want := Disk{Device: filepath.Join(x.dev, "vdb"), Name: "vdb", Serial: "VOL 123", SizeBytes: 2048 * 512, Major: 252, Minor: 16}
	for _, s := range []string{"VOL 123", "VOL_123", "  VOL 123\n"} {
		if d := mustFind(t, f, Selector{Serial: s}); d != want {
			t.Errorf("serial %q: got %+v, want %+v", s, d, want)
		}
	}
	mustNotFind(t, f, Selector{Serial: "VOL"})
	mustNotFind(t, f, Selector{Serial: "vol 123"})
	mustNotFind(t, f, Selector{WWN: "naa.5000c500a1b2c3d4"})
}

func TestFixtureNVMe(t *testing.T) {
	x := newFixture(t)
	ctrl := map[string]string{"device/serial": "S4EWNX0R123456      \n", "device/model": "Samsung SSD 970 EVO Plus 1TB            \n"}
	ns := func(wwid string) map[string]string {
		m := map[string]string{"wwid": wwid + "\n"}
		for k, v := range ctrl {
			m[k] = v
		}
		return m
	}
	x.disk("nvme0n1", 259, 0, true, ns("eui.0025388b91b2c3d4"))
	x.disk("nvme0n2", 259, 1, true, ns("eui.6479a74e2a0001230025384100000002"))
	// Native multipath: the per-path node is hidden, has no /dev node and
	// carries the same identifiers as its head.
	x.disk("nvme0c0n1", 0, 0, false, map[string]string{"hidden": "1\n", "wwid": "eui.0025388b91b2c3d4\n"})
	f := x.finder()

	n1 := Disk{Device: filepath.Join(x.dev, "nvme0n1"), Name: "nvme0n1", Serial: "S4EWNX0R123456",
		WWN: "eui.0025388b91b2c3d4", SizeBytes: 2048 * 512, Major: 259, Minor: 0}
	for _, w := range []string{"eui.0025388b91b2c3d4", "EUI.0025388B91B2C3D4", "0x0025388b91b2c3d4", "0025388B91B2C3D4"} {
		if d := mustFind(t, f, Selector{WWN: w}); d != n1 {
			t.Errorf("wwn %q: got %+v, want %+v", w, d, n1)
		}
	}
	if d := mustFind(t, f, Selector{WWN: "nguid.6479a74e-2a00-0123-0025-384100000002"}); d.Name != "nvme0n2" {
		t.Errorf("nguid selected %s, want nvme0n2", d.Name)
	}
	mustNotFind(t, f, Selector{WWN: "naa.0025388b91b2c3d4"})
	// An NVMe serial belongs to the controller: every namespace has it.
	mustFail(t, f, Selector{Serial: "S4EWNX0R123456"}, "matches several disks: nvme0n1, nvme0n2")
}

const naa16 = "600a0b800029a9e2000003b24f2b0c26"

func scsiDisk(serial string) map[string]string {
	return map[string]string{
		"device/vpd_pg80": vpd80(serial),
		"device/vpd_pg83": vpd83(
			desc(codeBinary, 1, desigNAA, []byte{0x50, 0x01, 0x43, 0x80, 0x12, 0x34, 0x56, 0x78}), // a target port: not the unit
			desc(codeASCII, 0, desigT10, []byte("ATA     WDC WD10EZEX-08W   ")),
			desc(codeBinary, 0, desigNAA, []byte{0x60, 0x0a, 0x0b, 0x80, 0x00, 0x29, 0xa9, 0xe2, 0x00, 0x00, 0x03, 0xb2, 0x4f, 0x2b, 0x0c, 0x26}), // naa16
		),
	}
}

func TestFixtureSCSI(t *testing.T) {
	x := newFixture(t)
	// An older kernel without device/wwid: the identifiers come from the
	// raw VPD pages only.
	x.disk("sda", 8, 0, true, scsiDisk("      WD-WCC4N1234567"))
	f := x.finder()

	want := Disk{Device: filepath.Join(x.dev, "sda"), Name: "sda", Serial: "WD-WCC4N1234567",
		WWN: "naa." + naa16, SizeBytes: 2048 * 512, Major: 8, Minor: 0}
	for _, s := range []Selector{
		{Serial: "WD-WCC4N1234567"},
		{WWN: "naa." + naa16},
		{WWN: "0x" + strings.ToUpper(naa16)},
		{WWN: "t10.ATA     WDC WD10EZEX-08W"},
	} {
		if d := mustFind(t, f, s); d != want {
			t.Errorf("%+v: got %+v, want %+v", s, d, want)
		}
	}
	mustNotFind(t, f, Selector{WWN: "naa.5001438012345678"}) // the port's name
}

func TestFixtureMultipath(t *testing.T) {
	x := newFixture(t)
	paths := map[string]string{"device/wwid": "naa.6001405abcdef0123456789abcdef012\n", "holders/dm-0": ""}
	x.disk("sdb", 8, 16, true, paths)
	x.disk("sdc", 8, 32, true, paths)
	x.disk("dm-0", 253, 0, true, map[string]string{"dm/uuid": "mpath-36001405abcdef0123456789abcdef012\n", "dm/name": "mpatha\n"})
	// Two disks with one WWN and no multipath map over them.
	twins := map[string]string{"device/wwid": "naa.5000c500a1b2c3d4\n"}
	x.disk("sdd", 8, 48, true, twins)
	x.disk("sde", 8, 64, true, twins)
	f := x.finder()

	d := mustFind(t, f, Selector{WWN: "naa.6001405abcdef0123456789abcdef012"})
	want := Disk{Device: filepath.Join(x.dev, "dm-0"), Name: "dm-0", WWN: "naa.6001405abcdef0123456789abcdef012",
		SizeBytes: 2048 * 512, Major: 253, Minor: 0}
	if d != want {
		t.Errorf("multipath: got %+v, want the map %+v", d, want)
	}
	mustFail(t, f, Selector{WWN: "0x5000c500a1b2c3d4"}, "matches several disks: sdd, sde")
}

func TestFixtureNodes(t *testing.T) {
	x := newFixture(t)
	x.disk("vdb", 252, 16, false, map[string]string{"serial": "NO-NODE-YET"})
	x.disk("vdc", 252, 32, false, map[string]string{"serial": "STALE-NODE"})
	x.node("vdc", 252, 48)
	// A name with '/' in /dev: the kernel writes '!' in sysfs.
	dir := x.disk("cciss!c0d0", 104, 0, false, map[string]string{"serial": "CCISS-1"})
	x.write(dir, map[string]string{"uevent": "MAJOR=104\nMINOR=0\nDEVTYPE=disk\n"})
	if err := os.Mkdir(filepath.Join(x.dev, "cciss"), 0o755); err != nil {
		t.Fatal(err)
	}
	x.node("cciss/c0d0", 104, 0)
	f := x.finder()

	mustNotFind(t, f, Selector{Serial: "NO-NODE-YET"})
	mustFail(t, f, Selector{Serial: "STALE-NODE"}, "is 252:48 but sysfs says vdc is 252:32")
	if d := mustFind(t, f, Selector{Serial: "CCISS-1"}); d.Device != filepath.Join(x.dev, "cciss", "c0d0") {
		t.Errorf("cciss device = %s", d.Device)
	}
}

func TestFixtureBrokenDiskElsewhere(t *testing.T) {
	x := newFixture(t)
	x.disk("sda", 8, 0, true, map[string]string{"device/vpd_pg80": "\x00\x80\x00\x40short"})
	x.disk("vdb", 252, 16, true, map[string]string{"serial": "GOOD"})
	f := x.finder()

	// The broken page does not hide a disk that is there…
	mustFind(t, f, Selector{Serial: "GOOD"})
	// …but when nothing matches it is reported: it may be the one.
	mustFail(t, f, Selector{Serial: "MISSING"}, "sda: device/vpd_pg80: VPD page 0x80 claims 64 bytes, has 5")
}

func TestFixturePartitionPath(t *testing.T) {
	x := newFixture(t)
	disk := x.disk("vdb", 252, 16, true, map[string]string{"serial": "VOL-9"})
	x.write(filepath.Join(disk, "vdb1"), map[string]string{"dev": "252:17\n", "size": "1024\n", "partition": "1\n"})
	if err := os.Symlink("../../block/vdb/vdb1", filepath.Join(x.sys, "dev", "block", "252:17")); err != nil {
		t.Fatal(err)
	}
	node := x.node("vdb1", 252, 17)
	link := filepath.Join(x.dev, "by-partuuid")
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	f := x.finder()

	want := Disk{Device: node, Name: "vdb1", Serial: "VOL-9", SizeBytes: 1024 * 512, Major: 252, Minor: 17}
	if d := mustFind(t, f, Selector{Path: link}); d != want {
		t.Errorf("partition: got %+v, want %+v", d, want)
	}
	// Whole disks only for serials: the partition does not make it ambiguous.
	if d := mustFind(t, f, Selector{Serial: "VOL-9"}); d.Name != "vdb" {
		t.Errorf("serial selected %s, want vdb", d.Name)
	}
	// A node the kernel no longer has a device for.
	mustNotFind(t, f, Selector{Path: x.node("vdz", 252, 99)})
}

// attachLoop binds a real loop device to an image in a temp dir and
// detaches it when the test ends, whatever happened.
func attachLoop(t *testing.T) *loop.Device {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if _, err := loop.EnsureImage(img, 64*mib); err != nil {
		t.Fatal(err)
	}
	d, err := loop.Attach(context.Background(), loop.Options{File: img, Tag: "volumed-device-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := loop.Detach(ctx, *d); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return d
}

func TestFindPathRealLoop(t *testing.T) {
	ld := attachLoop(t)
	var st unix.Stat_t
	if err := unix.Stat(ld.Path, &st); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	link := filepath.Join(dir, "by-id", "volumed-test-disk")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ld.Path, link); err != nil {
		t.Fatal(err)
	}
	var f Finder

	want := Disk{Device: ld.Path, Name: filepath.Base(ld.Path), SizeBytes: 64 * mib,
		Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
	for _, p := range []string{ld.Path, link} {
		if d := mustFind(t, f, Selector{Path: p}); d != want {
			t.Errorf("Find(%s) = %+v, want %+v", p, d, want)
		}
	}
	mustNotFind(t, f, Selector{Path: filepath.Join(dir, "absent")})
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "absent"), dangling); err != nil {
		t.Fatal(err)
	}
	mustNotFind(t, f, Selector{Path: dangling})
	img := filepath.Join(dir, "plain")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustFail(t, f, Selector{Path: img}, "is not a block device")
	mustFail(t, f, Selector{Path: "/dev/null"}, "/dev/null is not a block device")
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		s    Selector
		want string
	}{
		{Selector{}, "one of path, serial or wwn is required"},
		{Selector{Serial: "a", WWN: "b"}, "set only one"},
		{Selector{Path: "dev/sda"}, `path "dev/sda" is not absolute`},
		{Selector{Serial: " \x00 "}, "is blank"},
		{Selector{WWN: "0x"}, "is blank"},
	} {
		err := c.s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.s, err, c.want)
		}
		if _, ok, ferr := (Finder{}).Find(c.s); ok || ferr == nil {
			t.Errorf("Find(%+v) accepted an invalid selector", c.s)
		}
		if id := Identity(c.s); id != "" {
			t.Errorf("Identity(%+v) = %q, want empty", c.s, id)
		}
	}
}

func TestIdentity(t *testing.T) {
	for _, c := range []struct {
		a, b Selector
		want string
	}{
		{Selector{Path: "/dev/disk/by-id//wwn-0x5000/"}, Selector{Path: "/dev/disk/by-id/wwn-0x5000"}, "device:path:/dev/disk/by-id/wwn-0x5000"},
		{Selector{Serial: " S N  1 "}, Selector{Serial: "S_N_1"}, "device:serial:S_N_1"},
		{Selector{WWN: "0x5000C500A1B2C3D4"}, Selector{WWN: "5000c500a1b2c3d4"}, "device:wwn:0x5000c500a1b2c3d4"},
		{Selector{WWN: "NAA.5000C500A1B2C3D4"}, Selector{WWN: "naa.5000c500a1b2c3d4\n"}, "device:wwn:naa.5000c500a1b2c3d4"},
		{Selector{WWN: "nguid.6479a74e-2a00-0123-0025-384100000002"}, Selector{WWN: "eui.6479a74e2a0001230025384100000002"}, "device:wwn:eui.6479a74e2a0001230025384100000002"},
	} {
		if a, b := Identity(c.a), Identity(c.b); a != c.want || b != c.want {
			t.Errorf("Identity(%+v), Identity(%+v) = %q, %q; want %q", c.a, c.b, a, b, c.want)
		}
	}
	for _, c := range []Selector{{Path: "/dev/disk/by-id/wwn-0x5000"}, {Serial: "S_N_1"}, {WWN: "0x5000c500a1b2c3d4"}} {
		got, err := ParseIdentity(Identity(c))
		if err != nil || Identity(got) != Identity(c) {
			t.Errorf("ParseIdentity(%q) = %+v, %v", Identity(c), got, err)
		}
	}
	for _, bad := range []string{"", "device:", "device:path:", "device:label:x", "loop:path:/dev/sda", "device:path:dev/sda", "device:serial:  "} {
		if got, err := ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) = %+v; want an error", bad, got)
		}
	}
	if Identity(Selector{Serial: "X"}) == Identity(Selector{WWN: "X"}) {
		t.Error("a serial and a WWN with the same text share an identity")
	}
}

// Keys and SelectorKeys agree with Find: a selector that selects a disk
// shares a key with the disk's, one that does not shares none, so the
// event of the disk a volume waits for is told from every other's.
func TestKeysAgreeWithFind(t *testing.T) {
	x := newFixture(t)
	sda := x.disk("sda", 8, 0, true, scsiDisk("      WD-WCC4N1234567"))
	nvme := x.disk("nvme0n1", 259, 0, true, map[string]string{"wwid": "eui.0025388b91b2c3d4\n", "device/serial": "S4EW   \n"})
	vdb := x.disk("vdb", 252, 16, true, map[string]string{"serial": "VOL 9"})
	x.write(filepath.Join(vdb, "vdb1"), map[string]string{"dev": "252:17\n", "size": "1024\n", "partition": "1\n",
		"uevent": "DEVNAME=vdb1\nDEVTYPE=partition\n"})
	mapper := x.disk("dm-2", 253, 2, false, map[string]string{"dm/name": "vg0-data\n", "dm/uuid": "LVM-abc\n"})
	f := x.finder()
	dirs := map[string]string{"sda": sda, "nvme0n1": nvme, "vdb": vdb, "vdb1": filepath.Join(vdb, "vdb1"), "dm-2": mapper}
	for _, c := range []struct {
		sel  Selector
		want string // the one device whose keys it shares
	}{
		{Selector{Serial: "WD-WCC4N1234567"}, "sda"},
		{Selector{WWN: "naa." + naa16}, "sda"},
		{Selector{WWN: "0x" + strings.ToUpper(naa16)}, "sda"},
		{Selector{WWN: "t10.ATA     WDC WD10EZEX-08W"}, "sda"},
		{Selector{WWN: "EUI.0025388B91B2C3D4"}, "nvme0n1"},
		{Selector{WWN: "0025388b91b2c3d4"}, "nvme0n1"},
		{Selector{Serial: "VOL_9"}, "vdb"},
		{Selector{Path: "/dev/vdb1"}, "vdb1"},
		{Selector{Path: "/dev/mapper/vg0-data"}, "dm-2"},
		{Selector{WWN: "naa.5001438012345678"}, ""}, // a port's name, no disk's
		{Selector{Serial: "VOL-9"}, ""},
	} {
		if c.want != "" && c.sel.Path == "" {
			if d := mustFind(t, f, c.sel); d.Name != c.want {
				t.Fatalf("%+v: Find selected %s, want %s", c.sel, d.Name, c.want)
			}
		}
		want := c.sel
		for name, dir := range dirs {
			keys, err := Keys(dir)
			if err != nil {
				t.Fatalf("Keys(%s): %v", name, err)
			}
			shared := false
			for _, k := range SelectorKeys(want) {
				shared = shared || slices.Contains(keys, k)
			}
			if shared != (name == c.want) {
				t.Errorf("%+v and %s (keys %q): shared %v, want %v", c.sel, name, keys, shared, name == c.want)
			}
		}
	}
}
