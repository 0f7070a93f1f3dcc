// Package device is the `device` source kind: a local disk by path,
// serial or WWN (drivers/device), waited for and never detached.
package device

import (
	"context"
	"fmt"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	devicedrv "github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// Name is the manifest key and the driver's name.
const Name = "device"

// Source is `source.device`: a local disk, selected by exactly one of
// path, serial or wwn; never detached.
type Source struct {
	Path   string `yaml:"path,omitempty" json:"path,omitempty"`
	Serial string `yaml:"serial,omitempty" json:"serial,omitempty"`
	WWN    string `yaml:"wwn,omitempty" json:"wwn,omitempty"`
}

// Kind describes the device source kind.
type Kind struct{}

func (Kind) Name() string              { return Name }
func (Kind) Traits() kind.Traits       { return kind.Traits{AwaitsDisk: true} }
func (Kind) New() any                  { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs { return hostcheck.Needs{} }

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	d := spec.(*Source)
	kind.ExactlyOne(c, "", kind.Field{Name: "path", Value: d.Path}, kind.Field{Name: "serial", Value: d.Serial}, kind.Field{Name: "wwn", Value: d.WWN})
	if d.Path != "" {
		kind.DevPath(c, "path", d.Path)
	}
	caps := manifest.Caps{Key: "device " + d.Path + d.Serial + d.WWN}
	switch {
	case d.Path != "":
		caps.Claims = []manifest.Claim{{Key: "path\x00" + d.Path, Field: "path", What: "device " + d.Path}}
	case d.Serial != "":
		caps.Claims = []manifest.Claim{{Key: "serial\x00" + d.Serial, Field: "serial", What: "device with serial " + d.Serial}}
	case d.WWN != "":
		caps.Claims = []manifest.Claim{{Key: "wwn\x00" + d.WWN, Field: "wwn", What: "device with WWN " + d.WWN}}
	}
	return caps
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "", Check: kind.OneOf{"path", "serial", "wwn"}},
		{Type: "Source", Prop: "path", Check: kind.Dev},
	}
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{} }

// attacher adapts drivers/device: a local disk, never detached.
type attacher struct {
	kind.LocalInUse
	f devicedrv.Finder
}

func selector(d *agent.Desired) (devicedrv.Selector, error) {
	s, err := kind.Spec[Source](d, Name)
	if err != nil {
		return devicedrv.Selector{}, err
	}
	return devicedrv.Selector{Path: s.Path, Serial: s.Serial, WWN: s.WWN}, nil
}

func (a attacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	sel, err := selector(d)
	if err != nil {
		return nil, err
	}
	disk, ok, err := a.f.Find(sel)
	if err != nil || !ok {
		return nil, err
	}
	return []agent.Found{{Device: disk.Device, Identity: devicedrv.Identity(sel), Reusable: true}}, nil
}

// Attach is reached only when Find saw no disk: there is nothing to
// attach, so the volume waits (the disk's uevent retries it at once).
func (a attacher) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	sel, err := selector(d)
	if err != nil {
		return agent.Found{}, err
	}
	return agent.Found{}, kind.WaitingForDisk(sel.Path, devicedrv.SelectorKeys(sel),
		fmt.Errorf("waiting for the disk (%s) to appear", devicedrv.Identity(sel)))
}

func (a attacher) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	sel, err := devicedrv.ParseIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	disk, ok, err := a.f.Find(sel)
	return disk.Device, ok, err
}

func (attacher) Detach(context.Context, store.Attachment) error { return nil }
