// Package kinds lists the source kinds this build has.
//
// Adding one is a package under kinds/ that implements kind.Kind (its
// manifest type and checks, what no two volumes may share, whether it is
// staged or a block device (its Traits), its attacher, its schema rules) and one line
// in All; then `make schema`, an example in packaging/examples and a row
// in the README's table of sources. The tests of the manifest loader, the
// schema and the examples pick the new kind up from All.
package kinds

import (
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/kinds/device"
	"github.com/volumed/volumed/kinds/directory"
	"github.com/volumed/volumed/kinds/disk"
	"github.com/volumed/volumed/kinds/iscsi"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/kinds/loop"
	"github.com/volumed/volumed/kinds/lvm"
	"github.com/volumed/volumed/kinds/nvme"
	"github.com/volumed/volumed/kinds/overlay"
	"github.com/volumed/volumed/kinds/partition"
	"github.com/volumed/volumed/kinds/tmpfs"
)

// All returns the kinds, in the order messages and the schema list them.
func All() []kind.Kind {
	return []kind.Kind{
		loop.Kind{},
		iscsi.Kind{},
		nvme.Kind{},
		device.Kind{},
		directory.Kind{},
		tmpfs.Kind{},
		overlay.Kind{},
		disk.Kind{},
		partition.Kind{},
		lvm.Kind{},
	}
}

// Manifest is what the manifest loader needs of the kinds.
func Manifest(ks []kind.Kind) manifest.Kinds {
	out := make(manifest.Kinds, len(ks))
	for i, k := range ks {
		out[i] = sourceKind{k}
	}
	return out
}

// sourceKind is a kind as the manifest loader sees it.
type sourceKind struct{ kind.Kind }

func (s sourceKind) Staged() bool { return s.Traits().Staged }

// AwaitDisk names the kinds whose volumes wait for a block device to appear.
func AwaitDisk(ks []kind.Kind) []string {
	var out []string
	for _, k := range ks {
		if k.Traits().AwaitsDisk {
			out = append(out, k.Name())
		}
	}
	return out
}

// Network names the kinds that need the network.
func Network(ks []kind.Kind) []string {
	var out []string
	for _, k := range ks {
		if k.Traits().Network {
			out = append(out, k.Name())
		}
	}
	return out
}
