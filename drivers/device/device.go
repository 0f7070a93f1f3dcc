// Package device selects a local disk the host already has, by a node
// path, a serial number or a WWN as sysfs reports them. The disk is the
// host's: nothing here attaches or detaches anything, so a volume on it
// is never "detached", only unmounted.
//
// Selection by serial or WWN looks at whole disks only (the entries of
// /sys/block): a partition carries its disk's identifiers and would make
// every lookup ambiguous. A partition is selected by path (for example
// /dev/disk/by-partuuid/...). Hidden block devices (the per-path nodes of
// NVMe native multipath) are skipped, and the paths of one dm-multipath
// map collapse to the map.
//
// Finding never waits: a disk that is not there yet is reported as not
// found, and the caller retries or wakes on a uevent.
package device

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/sysfs"
)

// Selector names one disk. Exactly one field is set.
type Selector struct {
	Path   string // a block device node or a symlink to one, e.g. /dev/disk/by-id/...
	Serial string // as lsblk -o SERIAL or udev's ID_SERIAL_SHORT show it
	WWN    string // "naa.…", "eui.…", "nguid.…", "t10.…" or bare hex, with or without "0x"
}

// Validate reports a selector that does not name exactly one way to find
// a disk.
func (s Selector) Validate() error {
	n := 0
	for _, v := range []string{s.Path, s.Serial, s.WWN} {
		if v != "" {
			n++
		}
	}
	switch {
	case n == 0:
		return errors.New("device: one of path, serial or wwn is required")
	case n > 1:
		return errors.New("device: set only one of path, serial or wwn")
	case s.Path != "" && !filepath.IsAbs(s.Path):
		return fmt.Errorf("device: path %q is not absolute", s.Path)
	case s.Serial != "" && normSerial(s.Serial) == "":
		return fmt.Errorf("device: serial %q is blank", s.Serial)
	case s.WWN != "" && parseWWN(s.WWN).id == "":
		return fmt.Errorf("device: wwn %q is blank", s.WWN)
	}
	return nil
}

// Identity renders the selector as a stable identity for records, e.g.
// "device:serial:XYZ". Spellings that select the same disk the same way
// ("0xABC" and "abc", "S N" and "S_N") give the same identity. It is ""
// for a selector that fails Validate.
func Identity(s Selector) string {
	if s.Validate() != nil {
		return ""
	}
	switch {
	case s.Path != "":
		return "device:path:" + filepath.Clean(s.Path)
	case s.Serial != "":
		return "device:serial:" + normSerial(s.Serial)
	default:
		return "device:wwn:" + parseWWN(s.WWN).String()
	}
}

// SelectorKeys are the keys (those Keys gives a disk) of the disk s
// selects: a wait for it is told apart from other devices' events by
// them. A WWN is also keyed bare, as a bare WWN selects any kind.
func SelectorKeys(s Selector) []string {
	id := Identity(s)
	if id == "" {
		return nil
	}
	out := []string{id}
	if s.WWN != "" {
		if w := parseWWN(s.WWN); w.kind != "" {
			out = append(out, "device:wwn:"+wwn{id: w.id}.String())
		}
	}
	return out
}

// ParseIdentity reads an Identity back into a selector that selects the
// same disk.
func ParseIdentity(id string) (Selector, error) {
	kind, val, _ := strings.Cut(strings.TrimPrefix(id, "device:"), ":")
	var s Selector
	switch {
	case !strings.HasPrefix(id, "device:"):
	case kind == "path":
		s.Path = val
	case kind == "serial":
		s.Serial = val
	case kind == "wwn":
		s.WWN = val
	}
	if s == (Selector{}) || s.Validate() != nil {
		return Selector{}, fmt.Errorf("not a device identity: %q", id)
	}
	return s, nil
}

// Disk is a block device as the kernel reports it.
type Disk struct {
	Device    string // node path, e.g. /dev/vdb (symlinks resolved)
	Name      string // kernel name, e.g. vdb
	Serial    string // "" when sysfs has none
	WWN       string // the best identifier sysfs gives, "" when none
	SizeBytes int64
	Major     uint32
	Minor     uint32
}

// Finder looks disks up in a sysfs and a /dev tree. The zero value uses
// /sys and /dev; tests point it at fixture trees.
type Finder struct {
	SysRoot string // default "/sys"
	DevRoot string // default "/dev"
}

func (f Finder) sys(elem ...string) string {
	return filepath.Join(append([]string{sysfs.RootOr(f.SysRoot)}, elem...)...)
}

func (f Finder) dev(name string) string {
	root := f.DevRoot
	if root == "" {
		root = "/dev"
	}
	return filepath.Join(root, name)
}

// Find returns the disk s selects. found is false, with a nil error, when
// no such disk is present now. An error means the selector is invalid,
// the path is not a block device, several disks match, or sysfs could
// not be read.
func (f Finder) Find(s Selector) (d Disk, found bool, err error) {
	if err := s.Validate(); err != nil {
		return Disk{}, false, err
	}
	if s.Path != "" {
		d, found, err = f.byPath(s.Path)
		if err != nil {
			err = fmt.Errorf("find device path %s: %w", s.Path, err)
		}
		return d, found, err
	}
	d, found, err = f.byID(s)
	if err != nil {
		err = fmt.Errorf("find %s: %w", strings.TrimPrefix(Identity(s), "device:"), err)
	}
	return d, found, err
}

func (f Finder) byPath(p string) (Disk, bool, error) {
	node, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Disk{}, false, nil
	}
	if err != nil {
		return Disk{}, false, err
	}
	major, minor, ok, err := blockNode(node)
	if err != nil || !ok {
		return Disk{}, false, err
	}
	// /sys/dev/block/M:m links to the disk or partition the node opens;
	// a node whose device is gone (a stale static node) has no entry.
	dir, err := filepath.EvalSymlinks(f.sys("dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	if errors.Is(err, fs.ErrNotExist) {
		return Disk{}, false, nil
	}
	if err != nil {
		return Disk{}, false, err
	}
	d, err := readDisk(dir)
	if err != nil {
		return Disk{}, false, notFoundIfGone(err)
	}
	// A partition's identifiers are its disk's.
	idDir := dir
	if sysfs.IsPartition(dir) {
		idDir = filepath.Dir(dir)
	}
	ids, err := readIDs(idDir)
	if err != nil {
		return Disk{}, false, notFoundIfGone(err)
	}
	d.Device = node
	ids.fill(&d)
	return d, true, nil
}

// blockNode returns the device numbers of the block device node at p;
// ok is false when p does not exist.
func blockNode(p string) (major, minor uint32, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, 0, false, nil
		}
		return 0, 0, false, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return 0, 0, false, fmt.Errorf("%s is not a block device", p)
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev), true, nil
}

// notFoundIfGone turns a read that failed because the device vanished
// while being read into "not found".
func notFoundIfGone(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func (f Finder) byID(s Selector) (Disk, bool, error) {
	entries, err := os.ReadDir(f.sys("block"))
	if err != nil {
		return Disk{}, false, err
	}
	var (
		matches []match
		errs    []error
	)
	for _, e := range entries {
		dir := f.sys("block", e.Name())
		m, ok, err := probe(dir, s)
		if err = notFoundIfGone(err); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.Name(), err))
		}
		if ok {
			matches = append(matches, m)
		}
	}
	matches, err = f.collapseMultipath(matches)
	if err != nil {
		return Disk{}, false, err
	}
	switch len(matches) {
	case 0:
		// An unreadable disk might have been the one asked for.
		return Disk{}, false, errors.Join(errs...)
	case 1:
	default:
		names := make([]string, len(matches))
		for i, m := range matches {
			names[i] = m.disk.Name
		}
		return Disk{}, false, fmt.Errorf("matches several disks: %s", strings.Join(names, ", "))
	}
	d := matches[0].disk
	d.Device = f.dev(matches[0].devName)
	major, minor, ok, err := blockNode(d.Device)
	if err != nil || !ok {
		// No node yet: devtmpfs is normally faster than any reader, but
		// a caller that retries will see it.
		return Disk{}, false, err
	}
	if major != d.Major || minor != d.Minor {
		return Disk{}, false, fmt.Errorf("%s is %d:%d but sysfs says %s is %d:%d",
			d.Device, major, minor, d.Name, d.Major, d.Minor)
	}
	return d, true, nil
}

type match struct {
	disk    Disk
	dir     string
	devName string // node name under /dev
}

// probe reads the disk at dir and reports whether s selects it.
func probe(dir string, s Selector) (match, bool, error) {
	if hidden, err := sysfs.Attr(dir, "hidden"); err == nil && hidden == "1" {
		return match{}, false, nil
	}
	ids, err := readIDs(dir)
	if err != nil {
		return match{}, false, err
	}
	if !ids.selectedBy(s) {
		return match{}, false, nil
	}
	d, err := readDisk(dir)
	if err != nil {
		return match{}, false, err
	}
	ids.fill(&d)
	return match{disk: d, dir: dir, devName: devName(dir, d.Name)}, true, nil
}

// collapseMultipath replaces the paths of one dm-multipath map by the
// map: mounting one path would bypass multipath (and fail, the map holds
// it). Any other set of several matches is left for the caller to refuse.
func (f Finder) collapseMultipath(ms []match) ([]match, error) {
	if len(ms) < 2 {
		return ms, nil
	}
	holder := ""
	for _, m := range ms {
		hs, err := sysfs.Holders(m.dir)
		if err != nil || len(hs) != 1 || (holder != "" && hs[0] != holder) {
			return ms, nil
		}
		holder = hs[0]
	}
	dir := f.sys("block", holder)
	uuid, err := sysfs.Attr(dir, "dm", "uuid")
	if err != nil || !strings.HasPrefix(uuid, "mpath-") {
		return ms, nil
	}
	d, err := readDisk(dir)
	if err != nil {
		return nil, fmt.Errorf("multipath map %s: %w", holder, err)
	}
	d.Serial, d.WWN = ms[0].disk.Serial, ms[0].disk.WWN
	return []match{{disk: d, dir: dir, devName: devName(dir, holder)}}, nil
}

// readDisk reads the name, numbers and size of the block device at dir.
func readDisk(dir string) (Disk, error) {
	d := Disk{Name: filepath.Base(dir)}
	var err error
	if d.Major, d.Minor, err = sysfs.DevNumber(dir); err != nil {
		return Disk{}, err
	}
	if d.SizeBytes, err = sysfs.Size(dir); err != nil {
		return Disk{}, err
	}
	return d, nil
}

// devName is the node name under /dev the kernel gives the device: the
// uevent's DEVNAME, else the kernel name with '!' standing for '/'.
func devName(dir, name string) string {
	if s, err := sysfs.Text(dir, "uevent"); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(line, "DEVNAME="); ok && v != "" {
				return v
			}
		}
	}
	return strings.ReplaceAll(name, "!", "/")
}
