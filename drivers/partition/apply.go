package partition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/blockfs"
	"github.com/volumed/volumed/drivers/gpt"
	"github.com/volumed/volumed/internal/crashpoint"
	"github.com/volumed/volumed/internal/sysfs"
)

// Partition is a wanted partition as it is on disk and in the kernel.
type Partition struct {
	Label  string
	Number int    // the GPT slot and the kernel's partition number
	GUID   string // the partition's unique GUID (/dev/disk/by-partuuid)
	Device string // node path, e.g. /dev/sdb2; devtmpfs may take a moment to make it
	Start  int64  // bytes from the start of the disk
	Size   int64  // bytes
}

// Result is what Apply did and found.
type Result struct {
	Plan       Plan
	Wrote      bool        // the table was written (at most once per Apply)
	Told       []string    // what the kernel was told, e.g. "add 2", "resize 3"
	Partitions []Partition // the wanted partitions that exist now, in the order wanted
}

// hooks let tests stop Apply where a crash would.
type hooks struct {
	afterWrite func() error
}

// Apply brings the GPT of the whole disk at path, and the kernel's view
// of it, to hold wants. See the package comment for what it will and
// will not write. The error wraps ErrRefused when the disk is not
// volumed's to write; wants that do not fit are refused in
// Result.Plan.Actions while the others go ahead.
func Apply(ctx context.Context, path string, wants []Want) (Result, error) {
	// The crash tests kill the agent here: the table is on disk, the
	// kernel not told yet.
	crash := hooks{afterWrite: func() error { crashpoint.Hit("partition", "after-write"); return nil }}
	r, err := apply(ctx, path, wants, crash)
	if err != nil {
		return r, fmt.Errorf("partition %s: %w", path, err)
	}
	return r, nil
}

func apply(ctx context.Context, path string, wants []Want, h hooks) (Result, error) {
	if err := ValidateWants(wants); err != nil {
		return Result{}, err
	}
	// Read-only until a write is needed: a disk already right is never
	// opened for writing (which would also make udev rescan it).
	d, err := openDisk(path, unix.O_RDONLY)
	if err != nil {
		return Result{}, err
	}
	defer d.f.Close()
	// One Apply per disk at a time, across processes too: two volumes
	// on one disk each read, plan and write the whole table, and the
	// second would drop what the first added. The same lock keeps udev
	// (and any tool that follows systemd.io/BLOCK_DEVICE_LOCKING) from
	// probing a half-written table.
	if err := d.lock(ctx, unix.LOCK_EX); err != nil {
		return Result{}, err
	}
	cur, err := d.table()
	if err != nil {
		return Result{}, err
	}
	if cur == nil {
		if err := blank(ctx, path); err != nil {
			return Result{}, err
		}
	}
	plan, err := Decide(cur, d.geom, wants)
	if err != nil {
		return Result{}, err
	}
	res := Result{Plan: plan}
	if plan.Write {
		if cur != nil {
			if err := onlyOurs(ctx, path, cur); err != nil {
				return res, err
			}
		}
		if err := d.write(plan); err != nil {
			return res, err
		}
		res.Wrote = true
		if h.afterWrite != nil {
			if err := h.afterWrite(); err != nil {
				return res, err
			}
		}
		if cur, err = d.table(); err != nil {
			return res, fmt.Errorf("read back the table just written: %w", err)
		}
		if cur == nil || !cur.Agree {
			return res, errors.New("the table just written does not read back")
		}
	}
	if cur == nil {
		return res, nil // blank, and nothing wanted fits
	}
	for _, w := range wants {
		i := indexOf(cur.Entries, w.Label)
		if i < 0 {
			continue
		}
		e := cur.Entries[i]
		told, p, err := d.tellKernel(e)
		if err != nil {
			return res, err
		}
		if told != "" {
			res.Told = append(res.Told, told)
		}
		p.Label = w.Label
		res.Partitions = append(res.Partitions, p)
	}
	return res, nil
}

func indexOf(entries []gpt.Entry, label string) int {
	for i, e := range entries {
		if e.Name == label {
			return i
		}
	}
	return -1
}

// blank refuses a disk without a GPT that is not blank by the blank
// rule (internal/blank): a signature, a partition or holder the kernel
// has, or data where the rule reads.
func blank(ctx context.Context, path string) error {
	v, err := blockfs.IsBlank(ctx, path, blockfs.ExamineOptions{})
	if err != nil {
		return err
	}
	if !v.Blank {
		return fmt.Errorf("%w: the disk is not blank (%s): %s", ErrRefused, v.Reason, v.Message)
	}
	return nil
}

// onlyOurs refuses a disk with our table that also carries a signature
// outside its partitions (one inside is the partition's content): the
// table would be volumed's, the rest of the disk someone else's.
func onlyOurs(ctx context.Context, path string, t *gpt.Table) error {
	sigs, err := blockfs.ProbeDevice(ctx, path)
	if err != nil {
		return err
	}
	var foreign []blockfs.Signature
	for _, s := range sigs {
		if s.Usage == blockfs.UsagePartitionTable && s.Type == "gpt" {
			continue
		}
		inside := false
		for _, e := range t.Entries {
			lo, hi := int64(e.FirstLBA)*int64(t.SectorSize), int64(e.LastLBA+1)*int64(t.SectorSize)
			if s.Offset >= lo && s.Offset < hi {
				inside = true
			}
		}
		if !inside {
			foreign = append(foreign, s)
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("%w: besides volumed's partition table the disk carries %s", ErrRefused, describe(foreign))
	}
	return nil
}

func describe(sigs []blockfs.Signature) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = fmt.Sprintf("%s (%s at offset %d, found by %s)", s.Type, s.Usage, s.Offset, s.Source)
	}
	return strings.Join(parts, ", ")
}

type disk struct {
	path string
	f    *os.File
	geom Geometry
	sys  string // /sys/dev/block/M:m
}

func openDisk(path string, mode int) (*disk, error) {
	f, err := os.OpenFile(path, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := &disk{path: path, f: f}
	if err := d.init(); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

func (d *disk) init() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.f.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: d.path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("%s is not a block device", d.path)
	}
	d.sys = sysfs.NumberDir("", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	if sysfs.IsPartition(d.sys) {
		return fmt.Errorf("%w: %s is a partition, not a whole disk", ErrRefused, d.path)
	}
	ss, err := unix.IoctlGetInt(int(d.f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return fmt.Errorf("BLKSSZGET %s: %w", d.path, err)
	}
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return fmt.Errorf("BLKGETSIZE64 %s: %w", d.path, errno)
	}
	if size > 1<<62 {
		return fmt.Errorf("BLKGETSIZE64 %s: implausible size %d", d.path, size)
	}
	d.geom = Geometry{Size: int64(size), SectorSize: ss}
	return nil
}

// table reads the disk's GPT: nil when it has none, ErrRefused when one
// is there but neither copy is valid.
func (d *disk) table() (*gpt.Table, error) {
	t, err := gpt.Read(d.f, d.geom.Size, d.geom.SectorSize)
	switch {
	case errors.Is(err, gpt.ErrNoGPT):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return t, nil
}

// lock takes a BSD lock on the disk (released when d.f is closed),
// waiting for it as long as ctx lets.
func (d *disk) lock(ctx context.Context, how int) error {
	for {
		err := unix.Flock(int(d.f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("lock %s: %w", d.path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %s (held by another writer): %w", d.path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// write writes the planned table through a second, writable descriptor
// (d's lock is held).
func (d *disk) write(p Plan) error {
	w, err := os.OpenFile(d.path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	guid := p.DiskGUID
	if guid == "" {
		guid = gpt.NewDiskGUID()
	}
	if err := gpt.Write(w, d.geom.Size, d.geom.SectorSize, guid, p.Entries); err != nil {
		return fmt.Errorf("write the partition table: %w", err)
	}
	// The kernel reads the disk through the same page cache; the reader
	// descriptor sees the new table at once.
	return nil
}

// Find returns the volumed partition named label on the whole disk at
// path, as the table on disk and the kernel have it, writing nothing and
// telling the kernel nothing (for start-up, to adopt what is there).
// found is false when the table has no such partition or the kernel does
// not have it yet; the kernel having it elsewhere is an error.
func Find(ctx context.Context, path, label string) (p Partition, found bool, err error) {
	d, err := openDisk(path, unix.O_RDONLY)
	if err != nil {
		return Partition{}, false, fmt.Errorf("partition %s: %w", path, err)
	}
	defer d.f.Close()
	if err := d.lock(ctx, unix.LOCK_SH); err != nil {
		return Partition{}, false, err
	}
	t, err := d.table()
	if err != nil || t == nil {
		return Partition{}, false, err
	}
	i := indexOf(t.Entries, label)
	if i < 0 || t.Entries[i].Type != gpt.TypeVolumed {
		return Partition{}, false, nil
	}
	e := t.Entries[i]
	have, err := kernelParts(d.sys)
	if err != nil {
		return Partition{}, false, err
	}
	k, ok := have[e.Index]
	if !ok {
		return Partition{}, false, nil
	}
	ss := int64(d.geom.SectorSize)
	p = Partition{Label: label, Number: e.Index, GUID: e.GUID, Device: "/dev/" + k.devName, Start: int64(e.FirstLBA) * ss, Size: int64(e.Sectors()) * ss}
	if k.start != p.Start || k.size > p.Size {
		return Partition{}, false, fmt.Errorf("partition %s: the kernel's partition %d spans bytes %d+%d, the table's %q %d+%d", path, e.Index, k.start, k.size, label, p.Start, p.Size)
	}
	return p, true, nil
}
