// Package disk is the `disk` source kind: a whole local disk picked by a
// CEL expression over its facts (drivers/disk), e.g.
// `disk.transport == "nvme" && disk.size >= 1 * TiB && disk.blank`.
//
// The disk chosen is remembered by its WWN, else its serial, else its
// path (the attachment's identity), so a second disk that matches later
// never replaces it while it is there. When several disks match, the
// first in path order is taken; when none does, the volume waits (a
// uevent retries it) and its status says, disk by disk, why not. Two
// volumes never get one disk: the core refuses a second record of an
// identity another volume holds.
//
// Ref, Resolve and Identity are shared with kinds/partition, whose
// volumes name their disk the same ways.
package disk

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	devicedrv "github.com/volumed/volumed/drivers/device"
	diskdrv "github.com/volumed/volumed/drivers/disk"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// Name is the manifest key and the driver's name.
const Name = "disk"

// Source is `source.disk`: the whole disk the expression selects.
type Source struct {
	// Match is a CEL expression over `disk` (path, size, model, vendor,
	// serial, wwn, transport, rotational, removable, readOnly, blank,
	// signatures, partitions; KiB..PiB are defined) that must be a bool.
	Match string `yaml:"match" json:"match"`
}

// Kind describes the disk source kind.
type Kind struct{}

func (Kind) Name() string              { return Name }
func (Kind) Traits() kind.Traits       { return kind.Traits{AwaitsDisk: true} }
func (Kind) New() any                  { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs { return hostcheck.Needs{} }

func (Kind) Rules() []kind.Rule { return nil }

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	s := spec.(*Source)
	CheckMatch(c, "match", s.Match)
	// No claim: whether two expressions can select one disk is not
	// decidable from their text; the core refuses the second volume to
	// record a disk at attach time.
	return manifest.Caps{Key: "disk matching " + s.Match}
}

// CheckMatch reports an expression that is missing or does not compile,
// with the expression's own line and column (the field's place in the
// file is added by the manifest loader).
func CheckMatch(c *manifest.Check, field, expr string) {
	if strings.TrimSpace(expr) == "" {
		c.Report(field, "required: a CEL expression over disk, e.g. disk.serial == \"S3Z1\"")
		return
	}
	_, err := diskdrv.Compile(expr)
	var ce diskdrv.CompileErrors
	switch {
	case errors.As(err, &ce):
		for _, e := range ce {
			c.Report(field, fmt.Sprintf("expression line %d column %d: %s", e.Line, e.Column, e.Msg))
		}
	case err != nil:
		c.Report(field, err.Error())
	}
}

// Ref names one whole disk: by a CEL expression (match) or by exactly
// one of its serial, WWN or path.
type Ref struct {
	Match  string `yaml:"match,omitempty" json:"match,omitempty"`
	Serial string `yaml:"serial,omitempty" json:"serial,omitempty"`
	WWN    string `yaml:"wwn,omitempty" json:"wwn,omitempty"`
	Path   string `yaml:"path,omitempty" json:"path,omitempty"`
}

// Key is what the reference names, for claims and messages.
func (r Ref) Key() string {
	if r.Match != "" {
		return "disk matching " + r.Match
	}
	return strings.TrimPrefix(devicedrv.Identity(r.selector()), "device:")
}

// Waiting is err, the wait for the disk r names, stating what could
// bring it: for an expression any disk that appears, is written (a
// signature wiped) or loses a holder; else that disk alone.
func (r Ref) Waiting(err error) error {
	if r.Match != "" {
		return &agent.Waiting{For: agent.Awaited{AnyDisk: true, Release: true}, Err: err}
	}
	return kind.WaitingForDisk(r.Path, devicedrv.SelectorKeys(r.selector()), err)
}

func (r Ref) selector() devicedrv.Selector {
	return devicedrv.Selector{Path: r.Path, Serial: r.Serial, WWN: r.WWN}
}

// Disk is a disk a reference resolved to.
type Disk struct {
	Path     string // node, e.g. /dev/sdb
	Identity string // device:wwn:…, device:serial:… or device:path:…
	// Note says why this disk when the expression matched several.
	Note string
}

// Resolver finds the disk a reference names now.
type Resolver struct {
	Lister diskdrv.Lister
	Finder devicedrv.Finder
}

// Resolve returns the disk r names. found is false when none is there
// now; why then says, disk by disk, why none matched the expression.
func (rv Resolver) Resolve(ctx context.Context, r Ref) (d Disk, found bool, why string, err error) {
	if r.Match == "" {
		sel := r.selector()
		dd, ok, err := rv.Finder.Find(sel)
		if err != nil || !ok {
			return Disk{}, false, "no disk " + r.Key() + " is present", err
		}
		return Disk{Path: dd.Device, Identity: devicedrv.Identity(sel)}, true, "", nil
	}
	s, err := diskdrv.Compile(r.Match)
	if err != nil {
		return Disk{}, false, "", fmt.Errorf("disk selector %q: %w", r.Match, err)
	}
	disks, err := rv.Lister.List(ctx)
	if err != nil {
		return Disk{}, false, "", fmt.Errorf("list disks: %w", err)
	}
	sel := s.Select(disks)
	if sel.Chosen == nil {
		return Disk{}, false, sel.Why, nil
	}
	d = Disk{Path: sel.Chosen.Path, Identity: devicedrv.Identity(sel.Chosen.Selector())}
	if n := matches(sel); n > 1 {
		d.Note = "disk selector: " + sel.Why
	}
	return d, true, sel.Why, nil
}

func matches(sel diskdrv.Selection) int {
	n := 0
	for _, v := range sel.Verdicts {
		if v.Match {
			n++
		}
	}
	return n
}

// Locate finds the disk a recorded identity names, wherever it is now.
func (rv Resolver) Locate(identity string) (path string, ok bool, err error) {
	sel, err := devicedrv.ParseIdentity(identity)
	if err != nil {
		return "", false, err
	}
	dd, ok, err := rv.Finder.Find(sel)
	return dd.Device, ok, err
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{} }

// attacher: a whole local disk, never detached.
type attacher struct {
	kind.LocalInUse
	rv Resolver
}

func (a attacher) Find(ctx context.Context, d *agent.Desired) ([]agent.Found, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return nil, err
	}
	disk, ok, _, err := a.rv.Resolve(ctx, Ref{Match: s.Match})
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{{Device: disk.Path, Identity: disk.Identity, Reusable: true, Note: disk.Note}}, nil
}

// Attach is reached only when Find saw no matching disk: the volume
// waits (a uevent retries it), saying why each disk does not match.
func (a attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return agent.Found{}, err
	}
	ref := Ref{Match: s.Match}
	disk, ok, why, err := a.rv.Resolve(ctx, ref)
	switch {
	case err != nil:
		return agent.Found{}, err
	case ok: // appeared between Find and Attach
		return agent.Found{Device: disk.Path, Identity: disk.Identity, Reusable: true, Note: disk.Note}, nil
	}
	return agent.Found{}, ref.Waiting(fmt.Errorf("waiting for the disk: %s", why))
}

func (a attacher) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	return a.rv.Locate(at.Identity)
}

func (attacher) Detach(context.Context, store.Attachment) error { return nil }
