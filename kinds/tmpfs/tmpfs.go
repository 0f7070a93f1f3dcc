// Package tmpfs is the `tmpfs` source kind: a tmpfs of the manifest's
// size mounted at the staging path. Its content lives as long as the
// mount.
package tmpfs

import (
	"context"
	"strconv"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "tmpfs"

// Source is `source.tmpfs`: a tmpfs of the given size; its content goes
// when the volume is torn down.
type Source struct {
	Size      string `yaml:"size" json:"size"`
	SizeBytes int64  `yaml:"-" json:"-"`
}

// Kind describes the tmpfs source kind.
type Kind struct{}

func (Kind) Name() string              { return Name }
func (Kind) Traits() kind.Traits       { return kind.Traits{Staged: true} }
func (Kind) New() any                  { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs { return hostcheck.Needs{} }

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	t := spec.(*Source)
	t.SizeBytes = c.Size("size", t.Size)
	return manifest.Caps{}
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{{Type: "Source", Prop: "size", Check: kind.Size}}
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{kind.Unattached{Kind: Name}} }

// attacher has nothing to attach: Stage mounts the tmpfs.
type attacher struct{ kind.Unattached }

func (attacher) Stage(_ context.Context, d *agent.Desired, staging string) error {
	t, err := kind.Spec[Source](d, Name)
	if err != nil {
		return err
	}
	size := strconv.FormatInt(t.SizeBytes, 10)
	return mount.SafeMountDevice("tmpfs", staging, "tmpfs", []string{"size=" + size, "mode=0755"})
}

func (attacher) IsStaged(_ *agent.Desired, staging string) bool {
	m, err := mount.Lookup(staging)
	return err == nil && m != nil && m.Mountpoint == staging && m.FSType == "tmpfs"
}
