// Package kind is what every source kind (kinds/loop, kinds/iscsi, ...)
// gives: its manifest type and checks (manifest.SourceKind), the adapter
// of its driver to the core, its JSON Schema constraints and the host
// tools it needs. The list of kinds a build has is kinds.All.
package kind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/internal/inuse"
	"github.com/volumed/volumed/store"
)

// Kind is one kind of source.
type Kind interface {
	// Name, New and Check are manifest.SourceKind's; its Staged is
	// Traits().Staged (kinds.Manifest adapts one to the other).
	Name() string
	New() any
	Check(spec any, c *manifest.Check) manifest.Caps
	// Traits are what the kind is as a whole, the same for every source.
	Traits() Traits
	// Attacher adapts the kind's driver to the core (it may also be an
	// agent.Stager, Resizer, Refresher or BackingChecker).
	Attacher(env Env) agent.Attacher
	// Rules are the constraints of its manifest type that the Go types
	// cannot carry, for the JSON Schema.
	Rules() []Rule
	// Needs is what the driver asks of the host for spec (a source of
	// this kind, or New's zero value): the programs it runs (e.g.
	// iscsiadm) and the kernel modules it uses.
	Needs(spec any) hostcheck.Needs
}

// Traits are a kind's yes-or-no facts, one value per kind, which the
// loader and the core read instead of asking the kind one by one.
type Traits struct {
	// Staged: not a block device; the kind puts the source at the
	// staging path itself, and a filesystem block is refused (a block
	// source needs one). Its attacher is an agent.Stager.
	Staged bool
	// AwaitsDisk: its volumes wait for a block device the kernel
	// announces (a uevent retries them at once).
	AwaitsDisk bool
	// Network: its volumes need the network (a link coming up retries
	// them, `volumed shutdown --network` takes them down).
	Network bool
}

// Env is what attachers are built with.
type Env struct {
	// LoopTag marks the loop devices this agent makes.
	LoopTag string
	Host    firmware.HostIdentity
	Boot    []firmware.BootVolume
}

// Rule is one schema constraint: Check applies to property Prop ("" for
// the type itself) of the kind's type Type (packaging/schema applies it;
// one it does not know fails it).
type Rule struct {
	Type, Prop string
	Check      Constraint
}

// Constraint is one of Format, Min, Enum, Optional and OneOf.
type Constraint interface{ constraint() }

// Format is a shape of string the manifest checks by hand.
type Format string

// The formats.
const (
	Abs    Format = "abs"    // an absolute path
	Dev    Format = "dev"    // a path under /dev
	Size   Format = "size"   // a size with its unit, e.g. 10Gi
	Mode   Format = "mode"   // an octal file mode
	Portal Format = "portal" // an iSCSI portal, host:port
	IQN    Format = "iqn"    // an iSCSI name
	NQN    Format = "nqn"    // an NVMe name
	Port   Format = "port"   // a TCP port number
)

// Min is the least value of a number.
type Min int

// Enum lists a string's only values.
type Enum []string

// Optional is a property the type does not require (its zero value is
// the default).
type Optional string

// OneOf is a set of properties of which exactly one is set.
type OneOf []string

func (Format) constraint()   {}
func (Min) constraint()      {}
func (Enum) constraint()     {}
func (Optional) constraint() {}
func (OneOf) constraint()    {}

// Spec returns the value of a desired volume's source of kind name. A
// volume rebuilt from an attach intent holds it as the raw JSON the
// intent kept, decoded here: what identifies the source is there, the
// values validation derives (parsed sizes, durations) are not, and such a
// volume is only ever found and torn down.
func Spec[T any](d *agent.Desired, name string) (*T, error) {
	src := d.Spec.Source
	if src.Kind != name {
		return nil, fmt.Errorf("volume %s has a %s source, not %s", d.Name, src.Kind, name)
	}
	switch s := src.Spec.(type) {
	case *T:
		return s, nil
	case json.RawMessage:
		v := new(T)
		if err := json.Unmarshal(s, v); err != nil {
			return nil, fmt.Errorf("source %s of %s: %w", name, d.Name, err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("volume %s: source %s holds a %T", d.Name, name, src.Spec)
}

// busyError lets the core see a driver's busy error as agent.ErrBusy
// (to name the holders) while keeping the driver's words.
type busyError struct{ error }

func (busyError) Is(target error) bool { return target == agent.ErrBusy }
func (e busyError) Unwrap() error      { return e.error }

// MarkBusy marks err as agent.ErrBusy when it is the driver's busy error.
func MarkBusy(err, driverBusy error) error {
	if err != nil && errors.Is(err, driverBusy) {
		return busyError{err}
	}
	return err
}

// Unattached is the attacher half of a kind with nothing to attach (a
// tmpfs, an overlay): it is ours, always there, and its Stage does the
// work. Identity names the volume, as nothing else does.
type Unattached struct{ Kind string }

func (u Unattached) found(d *agent.Desired) agent.Found {
	return agent.Found{Device: u.Kind, Identity: u.Kind + ":" + d.Name, Owned: true}
}

func (u Unattached) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	return []agent.Found{u.found(d)}, nil
}

func (u Unattached) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	return u.found(d), nil
}

func (Unattached) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	return a.Device, true, nil
}

func (Unattached) Detach(context.Context, store.Attachment) error { return nil }

// Field is one of a set of alternative fields, as a check sees it.
type Field struct{ Name, Value string }

// ExactlyOne reports at field unless exactly one of the alternatives is
// set, naming those that are.
func ExactlyOne(c *manifest.Check, field string, alts ...Field) {
	var set, names []string
	for _, a := range alts {
		names = append(names, a.Name)
		if a.Value != "" {
			set = append(set, a.Name)
		}
	}
	if len(set) != 1 {
		got := "none"
		if len(set) > 1 {
			got = strings.Join(set, " and ")
		}
		c.Report(field, "exactly one of "+strings.Join(names, ", ")+" is required, got "+got)
	}
}

// DevPath reports at field unless p is a clean absolute path under /dev
// (a device node or one of udev's links to it).
func DevPath(c *manifest.Check, field, p string) {
	if c.Path(field, p) && !strings.HasPrefix(p, "/dev/") {
		c.Report(field, "must be under /dev")
	}
}

// WaitingForDisk is err (a wait for the disk at path, or with the
// identities keys, drivers/device.SelectorKeys) stating what it waits
// for, so that only that disk's events retry the volume. A node the
// kernel names (/dev/sdb, /dev/mapper/x) is told by its own event; a link
// udev makes (/dev/disk/by-id/…) appears only after the kernel's event,
// once udev has run, so the wait is left unstated: any device's event
// retries it, as any may be the one the link will name.
func WaitingForDisk(path string, keys []string, err error) error {
	if dir := filepath.Dir(filepath.Clean(path)); path != "" && dir != "/dev" && dir != "/dev/mapper" {
		return err
	}
	return &agent.Waiting{For: agent.Awaited{Keys: keys}, Err: err}
}

// LocalInUse is the agent.InUseChecker of the kinds that use a local
// device in place (a device path, a disk): by the one in-use rule
// (internal/inuse), a device mounted, held or open exclusively outside
// volumed is never attached.
type LocalInUse struct{}

// InUse implements agent.InUseChecker.
func (LocalInUse) InUse(device string) (*agent.Problem, error) {
	u, err := inuse.Check("", device)
	if err != nil {
		return nil, err
	}
	busy, why := inuse.Busy(u)
	if !busy {
		return nil, nil
	}
	return &agent.Problem{Reason: "InUseOutsideVolumed", Message: why +
		": volumed neither formats, mounts nor publishes a device something else uses; stop that use (or name another device) and volumed picks it up"}, nil
}
