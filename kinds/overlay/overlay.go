// Package overlay is the `overlay` source kind: an overlayfs of
// read-only lower directories under a writable upper one, e.g. an
// application's shipped defaults under the host's changes to them. The
// directories are never removed; what was written stays in upper.
package overlay

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "overlay"

// Source is `source.overlay`: read-only lower directories (the first on
// top) under a writable upper directory, merged by overlayfs.
type Source struct {
	// Lower are the read-only layers, topmost first; they must exist.
	Lower []string `yaml:"lower" json:"lower"`
	// Upper receives every change; Work is overlayfs's scratch directory
	// on the same filesystem. Both are made (mode 0755) when missing.
	Upper string `yaml:"upper" json:"upper"`
	Work  string `yaml:"work" json:"work"`
}

// Kind describes the overlay source kind.
type Kind struct{}

func (Kind) Name() string                     { return Name }
func (Kind) Traits() kind.Traits              { return kind.Traits{Staged: true} }
func (Kind) Needs(any) hostcheck.Needs        { return hostcheck.Needs{} }
func (Kind) New() any                         { return new(Source) }
func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{kind.Unattached{Kind: Name}} }

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "upper", Check: kind.Abs},
		{Type: "Source", Prop: "work", Check: kind.Abs},
	}
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	o := spec.(*Source)
	if len(o.Lower) == 0 {
		c.Report("lower", "required: one or more directories")
	}
	for i, l := range o.Lower {
		c.Path(fmt.Sprintf("lower[%d]", i), l)
	}
	upperOK, workOK := c.Path("upper", o.Upper), c.Path("work", o.Work)
	if upperOK && workOK && (safepath.Within(o.Upper, o.Work) || safepath.Within(o.Work, o.Upper)) {
		c.Report("work", fmt.Sprintf("must be apart from upper %s, neither inside the other", o.Upper))
	}
	for i, l := range o.Lower {
		if upperOK && (safepath.Within(l, o.Upper) || safepath.Within(o.Upper, l)) {
			c.Report(fmt.Sprintf("lower[%d]", i), fmt.Sprintf("must be apart from upper %s, neither inside the other", o.Upper))
		}
	}
	return manifest.Caps{
		Key: "overlay of " + strings.Join(o.Lower, ":") + " under " + o.Upper,
		Claims: []manifest.Claim{
			{Key: o.Upper, Field: "upper", What: "overlay upper directory " + o.Upper},
			{Key: o.Work, Field: "work", What: "overlay work directory " + o.Work},
		},
	}
}

// attacher has nothing to attach: Stage mounts the overlay.
type attacher struct{ kind.Unattached }

// Stage opens every layer with no symlink followed (upper and work are
// made if missing) and hands overlayfs the opened directories, so a path
// swapped for a link after the check cannot change what is merged.
func (attacher) Stage(_ context.Context, d *agent.Desired, staging string) error {
	o, err := kind.Spec[Source](d, Name)
	if err != nil {
		return err
	}
	fd := func(p string, create bool) (string, func(), error) {
		f, err := safepath.OpenDir(p, create)
		if err != nil {
			return "", nil, err
		}
		return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())), func() { f.Close() }, nil
	}
	var lower []string
	for _, l := range o.Lower {
		p, done, err := fd(l, false)
		if err != nil {
			return fmt.Errorf("overlay lower: %w", err)
		}
		defer done()
		lower = append(lower, p)
	}
	upper, done, err := fd(o.Upper, true)
	if err != nil {
		return fmt.Errorf("overlay upper: %w", err)
	}
	defer done()
	work, done, err := fd(o.Work, true)
	if err != nil {
		return fmt.Errorf("overlay work: %w", err)
	}
	defer done()
	return mount.SafeMountDevice(Name, staging, "overlay",
		[]string{"lowerdir=" + strings.Join(lower, ":"), "upperdir=" + upper, "workdir=" + work})
}

func (attacher) IsStaged(_ *agent.Desired, staging string) bool {
	m, err := mount.Lookup(staging)
	return err == nil && m != nil && m.Mountpoint == staging && m.FSType == "overlay"
}
