// Package directory is the `directory` source kind: a host directory,
// made with the manifest's mode and owner when missing, bound at the
// staging path. It is never removed.
package directory

import (
	"fmt"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "directory"

// Source is `source.directory`: a host directory bound at the volume's
// staging path; made when create is set and it is missing, never removed.
type Source struct {
	Path   string  `yaml:"path" json:"path"`
	Create *Create `yaml:"create,omitempty" json:"create,omitempty"`
}

type Create struct {
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	UID  int    `yaml:"uid,omitempty" json:"uid,omitempty"`
	GID  int    `yaml:"gid,omitempty" json:"gid,omitempty"`
}

// Kind describes the directory source kind.
type Kind struct{}

func (Kind) Name() string              { return Name }
func (Kind) Traits() kind.Traits       { return kind.Traits{Staged: true} }
func (Kind) New() any                  { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs { return hostcheck.Needs{} }

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	d := spec.(*Source)
	c.Path("path", d.Path)
	if cr := d.Create; cr != nil {
		if cr.Mode != "" {
			if _, err := manifest.ParseMode(cr.Mode); err != nil {
				c.Report("create.mode", err.Error())
			}
		}
		if cr.UID < 0 {
			c.Report("create.uid", fmt.Sprintf("must be 0 or more, got %d", cr.UID))
		}
		if cr.GID < 0 {
			c.Report("create.gid", fmt.Sprintf("must be 0 or more, got %d", cr.GID))
		}
	}
	return manifest.Caps{
		Key:    "directory " + d.Path,
		Claims: []manifest.Claim{{Key: d.Path, Field: "path", What: "directory " + d.Path}},
	}
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "path", Check: kind.Abs},
		{Type: "Create", Prop: "mode", Check: kind.Mode},
		{Type: "Create", Prop: "uid", Check: kind.Min(0)},
		{Type: "Create", Prop: "gid", Check: kind.Min(0)},
	}
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{} }
