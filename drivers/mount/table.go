package mount

import (
	"fmt"
	"path"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
)

// Table is one consistent read of /proc/self/mountinfo, indexed.
type Table struct {
	all     []*mountinfo.Info
	byID    map[int]*mountinfo.Info
	byPoint map[string][]*mountinfo.Info // bottom to top
}

// ReadTable reads all mounts once.
func ReadTable() (*Table, error) {
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return newTable(infos), nil
}

// NewTable indexes mounts read elsewhere (a test's table).
func NewTable(infos []*mountinfo.Info) *Table { return newTable(infos) }

func newTable(infos []*mountinfo.Info) *Table {
	t := &Table{
		all:     infos,
		byID:    make(map[int]*mountinfo.Info, len(infos)),
		byPoint: map[string][]*mountinfo.Info{},
	}
	grouped := map[string][]*mountinfo.Info{}
	for _, m := range infos {
		t.byID[m.ID] = m
		grouped[m.Mountpoint] = append(grouped[m.Mountpoint], m)
	}
	for p, ms := range grouped {
		t.byPoint[p] = stackOrder(ms)
	}
	return t
}

// stackOrder orders mounts that share one mount point bottom to top. A
// mount stacked on another has it as its parent; file order alone is not
// enough, because propagation can tuck a new mount underneath an old one.
func stackOrder(ms []*mountinfo.Info) []*mountinfo.Info {
	if len(ms) < 2 {
		return ms
	}
	here := map[int]bool{}
	onTop := map[int]*mountinfo.Info{} // parent ID -> mount on it
	for _, m := range ms {
		here[m.ID] = true
	}
	var bottoms []*mountinfo.Info
	for _, m := range ms {
		if here[m.Parent] && m.Parent != m.ID {
			if _, dup := onTop[m.Parent]; !dup {
				onTop[m.Parent] = m
				continue
			}
		}
		bottoms = append(bottoms, m)
	}
	out := make([]*mountinfo.Info, 0, len(ms))
	placed := map[int]bool{}
	for _, b := range bottoms {
		for m := b; m != nil && !placed[m.ID]; m = onTop[m.ID] {
			out = append(out, m)
			placed[m.ID] = true
		}
	}
	// Anything not reached (a parent cycle cannot happen in a sane table,
	// but the input is the kernel's text) keeps file order, on top.
	for _, m := range ms {
		if !placed[m.ID] {
			out = append(out, m)
		}
	}
	return out
}

// At returns every mount stacked exactly at path, bottom to top.
func (t *Table) At(p string) []*mountinfo.Info { return t.byPoint[filepath.Clean(p)] }

// Top returns the topmost mount at path, the one a lookup of path sees,
// or nil.
func (t *Table) Top(p string) *mountinfo.Info {
	ms := t.At(p)
	if len(ms) == 0 {
		return nil
	}
	return ms[len(ms)-1]
}

// ByID returns the mount with the given mount ID, or nil.
func (t *Table) ByID(id int) *mountinfo.Info { return t.byID[id] }

// All returns every mount in mountinfo order.
func (t *Table) All() []*mountinfo.Info { return t.all }

// Lookup returns the topmost mount whose mount point is exactly path
// (cleaned, no symlinks resolved), or nil.
func Lookup(p string) (*mountinfo.Info, error) {
	p = filepath.Clean(p)
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != p, false
	})
	if err != nil {
		return nil, fmt.Errorf("lookup mount at %s: %w", p, err)
	}
	return newTable(infos).Top(p), nil
}

// SameSource is the function SameSource, for callers that hold a table.
func (*Table) SameSource(a, b *mountinfo.Info, subPath string) bool { return SameSource(a, b, subPath) }

// SameSource reports whether a (a bind mount at a target) shows the same
// filesystem as b (the staging mount) at b.Root+subPath: same device
// number and same root inside the filesystem.
func SameSource(a, b *mountinfo.Info, subPath string) bool {
	if a == nil || b == nil {
		return false
	}
	return a.Major == b.Major && a.Minor == b.Minor &&
		path.Clean("/"+a.Root) == path.Join("/", b.Root, subPath)
}
