// Package loop is the `loop` source kind: an image file on a loop device
// (drivers/loop), made sparse if missing, grown with the manifest's size.
package loop

import (
	"fmt"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "loop"

// Source is `source.loop`: an image file attached to a loop device;
// created sparse when create is set and it is missing, never truncated.
type Source struct {
	File     string  `yaml:"file" json:"file"`
	Create   *Create `yaml:"create,omitempty" json:"create,omitempty"`
	ReadOnly bool    `yaml:"readOnly,omitempty" json:"readOnly,omitempty"`
}

type Create struct {
	// Size as written ("10Gi", "64Mi", "1G", "1048576"); SizeBytes is the parsed value.
	Size      string `yaml:"size" json:"size"`
	SizeBytes int64  `yaml:"-" json:"-"`
	// Overcommit allows a size larger than the free space of the
	// filesystem holding the image. Off, such a size is refused: a
	// sparse image that runs out of room there corrupts the filesystem
	// inside it.
	Overcommit bool `yaml:"overcommit,omitempty" json:"overcommit,omitempty"`
}

// Kind describes the loop source kind.
type Kind struct{}

func (Kind) Name() string        { return Name }
func (Kind) Traits() kind.Traits { return kind.Traits{} }
func (Kind) New() any            { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs {
	return hostcheck.Needs{Modules: []hostcheck.Module{{Name: "loop", What: "loop devices", Dev: "loop-control"}}}
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	l := spec.(*Source)
	if c.Path("file", l.File) {
		for _, top := range []string{"/proc", "/sys", "/dev"} {
			if safepath.Within(l.File, top) {
				c.Report("file", fmt.Sprintf("must not be %s or under it", top))
			}
		}
	}
	caps := manifest.Caps{
		ReadOnly:  l.ReadOnly,
		ImageFile: l.File,
		Key:       "loop file " + l.File,
		Claims:    []manifest.Claim{{Key: l.File, Field: "file", What: "loop file " + l.File}},
	}
	if l.ReadOnly {
		caps.Key += " (read-only)"
	}
	if l.Create != nil {
		l.Create.SizeBytes = c.Size("create.size", l.Create.Size)
		caps.Size, caps.SizeField = l.Create.SizeBytes, "create.size"
	}
	return caps
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{{Type: "Source", Prop: "file", Check: kind.Abs}, {Type: "Create", Prop: "size", Check: kind.Size}}
}

func (Kind) Attacher(env kind.Env) agent.Attacher {
	return attacher{tag: env.LoopTag, idx: newIndex()}
}
