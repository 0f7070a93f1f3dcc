package disk

import (
	"context"
	"errors"
	"github.com/volumed/volumed/internal/blank"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/drivers/gpt"
)

// testdata/sys is a FAKE sysfs laid out as a 6.x kernel lays out a SATA
// SSD (one partition) and HDD, a USB stick, an iSCSI LUN (its VPD page
// 0x83 cut short), a PCIe NVMe
// namespace (4K sectors), an NVMe/TCP one with its hidden per-path node,
// an NVMe/RDMA one under native multipath (its device is the subsystem),
// a read-only virtio disk, a virtio-scsi disk, a bound and an unbound
// loop device, a dm-multipath map and its two paths, and block devices
// that are never disks (ram, zram, sr, md, an LVM volume).

// fakeLook stands for reading the disks' sectors.
func fakeLook(_ context.Context, path string, size int64, ss int) (Look, error) {
	sig := func(t, usage string) []blockfs.Signature {
		return []blockfs.Signature{{Type: t, Usage: usage, Source: blockfs.SourceVolumed}}
	}
	switch path {
	case "/dev/sda":
		return Look{Signatures: sig("gpt", blockfs.UsagePartitionTable), Table: &gpt.Table{SectorSize: ss, Entries: []gpt.Entry{
			{Index: 1, FirstLBA: 2048, LastLBA: 1953525134, Name: "root", Type: "0FC63DAF-8483-4772-8E79-3D69D8477DE4", GUID: "6E3B1F4A-0000-4000-8000-000000000001"},
		}}}, nil
	case "/dev/sdc":
		return Look{Signatures: sig("dos", blockfs.UsagePartitionTable)}, nil
	case "/dev/vda":
		return Look{Signatures: append(sig("ext4", blockfs.UsageFilesystem), sig("ext4", blockfs.UsageFilesystem)...)}, nil
	case "/dev/loop0":
		return Look{}, errors.New("read 512 bytes at offset 0: input/output error")
	}
	return Look{Zeros: blank.Zeros{Read: true, FirstNonZero: -1}}, nil
}

func list(t *testing.T) []Facts {
	t.Helper()
	disks, err := Lister{SysRoot: "testdata/sys", DevRoot: "/dev", Look: fakeLook}.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return disks
}

func byName(disks []Facts, name string) Facts {
	i := slices.IndexFunc(disks, func(d Facts) bool { return d.Name == name })
	if i < 0 {
		return Facts{}
	}
	return disks[i]
}

func TestListWhichDisks(t *testing.T) {
	var paths []string
	for _, d := range list(t) {
		paths = append(paths, d.Path)
	}
	want := []string{"/dev/dm-1", "/dev/loop0", "/dev/nvme0n1", "/dev/nvme1n1", "/dev/nvme2n1", "/dev/sda", "/dev/sdb", "/dev/sdc", "/dev/sdd", "/dev/sde", "/dev/vda"}
	if !slices.Equal(paths, want) {
		t.Fatalf("disks %v\nwant  %v", paths, want)
	}
}

func TestListFacts(t *testing.T) {
	disks := list(t)
	sda := Facts{
		Name: "sda", Path: "/dev/sda", Size: 1953525168 * 512, Model: "Samsung SSD 870", Vendor: "ATA",
		Serial: "S6PNNX0R123456", WWN: "naa.5002538e40a1b2c3", Transport: "sata",
		NotBlank: "Signature", Signatures: []string{"gpt"},
		Partitions: []Partition{{Number: 1, Name: "sda1", Path: "/dev/sda1", Start: 2048 * 512, Size: 1953523087 * 512,
			Label: "root", Type: "0FC63DAF-8483-4772-8E79-3D69D8477DE4", UUID: "6E3B1F4A-0000-4000-8000-000000000001"}},
	}
	if got := byName(disks, "sda"); !reflect.DeepEqual(got, sda) {
		t.Errorf("sda:\n got %+v\nwant %+v", got, sda)
	}
	nvme := Facts{
		Name: "nvme0n1", Path: "/dev/nvme0n1", Size: 1953525168 * 512, Model: "Samsung SSD 980 PRO 1TB",
		Serial: "S5GXNX0T123456", WWN: "eui.002538b911b2c3d4", Transport: "nvme", Blank: true,
		Signatures: []string{}, Partitions: []Partition{},
	}
	if got := byName(disks, "nvme0n1"); !reflect.DeepEqual(got, nvme) {
		t.Errorf("nvme0n1:\n got %+v\nwant %+v", got, nvme)
	}
	for name, tran := range map[string]string{
		"sdb": "sata", "sdc": "usb", "sdd": "iscsi", "nvme1n1": "nvme-tcp", "nvme2n1": "nvme-rdma", "vda": "virtio", "sde": "scsi", "loop0": "loop", "dm-1": "",
	} {
		if got := byName(disks, name).Transport; got != tran {
			t.Errorf("%s: transport %q, want %q", name, got, tran)
		}
	}
	if d := byName(disks, "sdb"); !d.Rotational || d.Removable || d.ReadOnly || !d.Blank || d.Serial != "WD-WCC7K1234567" {
		t.Errorf("sdb: %+v", d)
	}
	if d := byName(disks, "sdc"); !d.Removable || d.Blank || !slices.Equal(d.Signatures, []string{"dos"}) || d.Vendor != "SanDisk" {
		t.Errorf("sdc: %+v", d)
	}
	if d := byName(disks, "vda"); !d.ReadOnly || d.Serial != "data-disk-1" || d.Blank || !slices.Equal(d.Signatures, []string{"ext4"}) {
		t.Errorf("vda: %+v", d)
	}
	// A disk whose VPD page 0x83 is cut short is listed, without
	// identifiers, saying why; its sectors were still looked at.
	if d := byName(disks, "sdd"); d.WWN != "" || !d.Blank || !strings.Contains(d.ProbeError, "identifiers: device/vpd_pg83") {
		t.Errorf("sdd: %+v", d)
	}
	// A disk that could not be read is never blank, and says why.
	if d := byName(disks, "loop0"); d.Blank || !strings.Contains(d.ProbeError, "input/output error") {
		t.Errorf("loop0: %+v", d)
	}
}

func TestSelect(t *testing.T) {
	disks := list(t)
	for _, tc := range []struct {
		expr, chosen, why string
		notWhy            []string
	}{
		{expr: `disk.transport == "nvme" && disk.size >= 100 * GiB && !disk.rotational`, chosen: "/dev/nvme0n1", why: "/dev/nvme0n1 is the only disk that matches"},
		{expr: `disk.blank && !disk.removable && disk.transport in ["sata", "scsi"]`, chosen: "/dev/sdb",
			why: "2 disks match (/dev/sdb, /dev/sde); /dev/sdb is the first by path"},
		{expr: `disk.partitions.exists(p, p.label == "root")`, chosen: "/dev/sda"},
		{expr: `disk.serial == "data-disk-1"`, chosen: "/dev/vda"},
		{expr: `disk.wwn == "naa.5002538e40a1b2c3"`, chosen: "/dev/sda"},
		{expr: `disk.model.startsWith("Samsung") && disk.blank`, chosen: "/dev/nvme0n1"},
		{
			expr: `disk.transport == "nvme" && disk.size >= 2 * TiB`,
			why:  `/dev/nvme0n1: false: disk.size >= 2 * TiB (disk.size is 1000204886016)`,
			// Only the parts that are false are named.
			notWhy: []string{`/dev/nvme0n1: false: disk.transport == "nvme"`},
		},
		{expr: `disk.transport == "nvme" && disk.size >= 2 * TiB`, why: `/dev/sdb: false: disk.transport == "nvme" (disk.transport is "sata");`},
		{expr: `disk.partitions[0].label == "root"`, chosen: "/dev/sda", why: "only disk"},
	} {
		s, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("Compile(%s): %v", tc.expr, err)
		}
		sel := s.Select(disks)
		got := ""
		if sel.Chosen != nil {
			got = sel.Chosen.Path
		}
		if got != tc.chosen || !strings.Contains(sel.Why, tc.why) {
			t.Errorf("%s: chose %q (%s); want %q, why containing %q", tc.expr, got, sel.Why, tc.chosen, tc.why)
		}
		for _, n := range tc.notWhy {
			if strings.Contains(sel.Why, n) {
				t.Errorf("%s: why %q names %q", tc.expr, sel.Why, n)
			}
		}
		if len(sel.Verdicts) != len(disks) {
			t.Errorf("%s: %d verdicts for %d disks", tc.expr, len(sel.Verdicts), len(disks))
		}
	}
}

// An expression that fails on a disk (index out of range) does not match
// it, and says why; other disks still do.
func TestSelectEvalErrors(t *testing.T) {
	s, err := Compile(`disk.partitions[0].size > 0`)
	if err != nil {
		t.Fatal(err)
	}
	sel := s.Select(list(t))
	if sel.Chosen == nil || sel.Chosen.Path != "/dev/sda" {
		t.Fatalf("chose %+v", sel.Chosen)
	}
	if v := sel.Verdicts[slices.IndexFunc(sel.Verdicts, func(v Verdict) bool { return v.Disk.Name == "sdb" })]; v.Match || !strings.Contains(v.Why, "error:") {
		t.Errorf("sdb: %+v", v)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		expr      string
		line, col int
		msg       string
	}{
		{`disk.transprot == "nvme"`, 1, 5, "undefined field 'transprot'"},
		{`dsk.size > 1`, 1, 1, "undeclared reference to 'dsk'"},
		{"disk.size > 0 &&\n  disk.rotational ==", 2, 21, "Syntax error"},
		{`disk.size`, 1, 1, "must be true or false"},
		{`disk.size > "big"`, 1, 11, "no matching overload"},
	} {
		_, err := Compile(tc.expr)
		var ce CompileErrors
		if !errors.As(err, &ce) || len(ce) == 0 {
			t.Fatalf("Compile(%q) = %v; want CompileErrors", tc.expr, err)
		}
		if ce[0].Line != tc.line || ce[0].Column != tc.col || !strings.Contains(ce[0].Msg, tc.msg) {
			t.Errorf("Compile(%q): %+v; want %d:%d %s", tc.expr, ce[0], tc.line, tc.col, tc.msg)
		}
	}
}

func TestCompare(t *testing.T) {
	in := []string{"/dev/sdb", "/dev/nvme10n1", "/dev/sda", "/dev/nvme2n1", "/dev/nvme2n1p1", "/dev/loop0"}
	slices.SortFunc(in, Compare)
	want := []string{"/dev/loop0", "/dev/nvme2n1", "/dev/nvme2n1p1", "/dev/nvme10n1", "/dev/sda", "/dev/sdb"}
	if !slices.Equal(in, want) {
		t.Fatalf("sorted %v, want %v", in, want)
	}
}

// The chosen disk is recorded by what survives a reboot.
func TestFactsSelector(t *testing.T) {
	disks := list(t)
	for name, want := range map[string]string{
		"sda": "device:wwn:naa.5002538e40a1b2c3", "vda": "device:serial:data-disk-1", "loop0": "device:path:/dev/loop0",
	} {
		if got := device.Identity(byName(disks, name).Selector()); got != want {
			t.Errorf("%s: identity %q, want %q", name, got, want)
		}
	}
}

// Select orders the disks itself: given them in any order, it picks and
// reports the first match by path, not the first in the slice.
func TestSelectOrdersByPath(t *testing.T) {
	disks := list(t)
	slices.Reverse(disks)
	s, err := Compile(`disk.blank && !disk.removable && disk.transport in ["sata", "scsi"]`)
	if err != nil {
		t.Fatal(err)
	}
	sel := s.Select(disks)
	if sel.Chosen == nil || sel.Chosen.Path != "/dev/sdb" || sel.Why != "2 disks match (/dev/sdb, /dev/sde); /dev/sdb is the first by path" {
		t.Errorf("chosen %+v, why %q", sel.Chosen, sel.Why)
	}
	for i := 1; i < len(sel.Verdicts); i++ {
		if Compare(sel.Verdicts[i-1].Disk.Path, sel.Verdicts[i].Disk.Path) > 0 {
			t.Errorf("verdicts not in path order: %s before %s", sel.Verdicts[i-1].Disk.Path, sel.Verdicts[i].Disk.Path)
		}
	}
}
