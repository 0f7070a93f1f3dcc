package partition

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/drivers/gpt"
)

// kpart is a partition as the kernel has it (sysfs counts 512-byte
// sectors whatever the disk's block size).
type kpart struct {
	number      int
	start, size int64 // bytes
	devName     string
}

// kernelParts is device.Partitions by number.
func kernelParts(dir string) (map[int]kpart, error) {
	ps, err := device.Partitions(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]kpart, len(ps))
	for _, p := range ps {
		out[p.Number] = kpart{number: p.Number, start: p.Start, size: p.Size, devName: p.Node}
	}
	return out, nil
}

// tellKernel makes the kernel's partition e.Index match the entry: added
// when missing, enlarged when smaller. A kernel partition of that number
// elsewhere on the disk, or larger, is another tool's doing and an error:
// it may be in use, and is never removed.
func (d *disk) tellKernel(e gpt.Entry) (told string, p Partition, err error) {
	ss := int64(d.geom.SectorSize)
	want := kpart{number: e.Index, start: int64(e.FirstLBA) * ss, size: int64(e.Sectors()) * ss}
	have, err := kernelParts(d.sys)
	if err != nil {
		return "", Partition{}, err
	}
	k, ok := have[e.Index]
	switch {
	case !ok:
		told = fmt.Sprintf("add %d", e.Index)
		err = d.blkpg(unix.BLKPG_ADD_PARTITION, want, e.Name)
	case k.start != want.start || k.size > want.size:
		return "", Partition{}, fmt.Errorf("the kernel's partition %d spans bytes %d+%d, the table's %q %d+%d: the table was changed behind volumed (a reboot or partprobe once nothing uses the disk reconciles them)",
			e.Index, k.start, k.size, e.Name, want.start, want.size)
	case k.size < want.size:
		told = fmt.Sprintf("resize %d", e.Index)
		err = d.blkpg(unix.BLKPG_RESIZE_PARTITION, want, e.Name)
	}
	if err != nil {
		// udev may have rescanned the disk meanwhile and added it
		// (EBUSY): right is right, whoever did it.
		now, rerr := kernelParts(d.sys)
		if k, ok := now[e.Index]; rerr != nil || !ok || k.start != want.start || k.size != want.size {
			return "", Partition{}, fmt.Errorf("tell the kernel: %s: %w", told, err)
		}
		told = ""
	}
	now, err := kernelParts(d.sys)
	if err != nil {
		return "", Partition{}, err
	}
	k, ok = now[e.Index]
	if !ok {
		return "", Partition{}, fmt.Errorf("the kernel shows no partition %d after it was told", e.Index)
	}
	return told, Partition{Number: e.Index, GUID: e.GUID, Device: "/dev/" + k.devName, Start: want.start, Size: want.size}, nil
}

func (d *disk) blkpg(op int32, p kpart, name string) error {
	part := unix.BlkpgPartition{Start: p.start, Length: p.size, Pno: int32(p.number)}
	copy(part.Volname[:len(part.Volname)-1], name)
	arg := unix.BlkpgIoctlArg{Op: op, Datalen: int32(unsafe.Sizeof(part)), Data: (*byte)(unsafe.Pointer(&part))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg)))
	if errno != 0 {
		return fmt.Errorf("BLKPG %s: %w", d.path, errno)
	}
	return nil
}
