package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SourceKind is what the manifest package needs of one kind of source
// (loop, iscsi, ...): the kinds themselves live in their own packages
// (kinds/*) and are handed in through Options.Kinds, so this package never
// names one.
type SourceKind interface {
	// Name is the key under spec.source and the driver's name.
	Name() string
	// Staged: not a block device; the kind puts the source at the
	// staging path itself, and a filesystem block is refused (a block
	// source needs one).
	Staged() bool
	// New returns a pointer to a zero value of the kind's manifest type,
	// which the strict decoder fills.
	New() any
	// Check validates the decoded value (fields relative to
	// spec.source.<name>), fills its defaults and parsed values, and
	// says what the source is.
	Check(spec any, c *Check) Caps
}

// Caps is what the agent and the loader need to know of one source,
// computed once when it is validated: the core reads these, never a
// kind's own fields.
type Caps struct {
	// ReadOnly: the source can only be used read-only.
	ReadOnly bool
	// ImageFile is the host file the device reads, if any (its
	// filesystem's free space is watched unless ReadOnly); Size is the
	// size the kind keeps it at (grown to, never shrunk), 0 for none.
	ImageFile string
	Size      int64
	// SizeField is the field that holds Size (relative to
	// spec.source.<name>), "" for a kind that keeps no size: a CSI
	// expansion writes the size asked for there.
	SizeField string
	// RefuseShrink: a Size under the source's present size is refused
	// with a condition (an LV's size is the LV's own), not ignored as a
	// loop image's is (its Size only sizes the file to create).
	RefuseShrink bool
	// Key names what the source attaches: the fields that cannot change
	// under a live attachment (tunables such as timeouts, and a size,
	// which grows, are left out).
	Key string
	// Claims are what no two volumes may share.
	Claims []Claim
}

// Claim is one thing only one volume may use, e.g. a loop image file.
type Claim struct {
	Key   string // compared between volumes; the kind's name is added
	Field string // relative to spec.source.<name>; "" for the member itself
	What  string // for messages: "loop file /x.img"
}

// Kinds is the set of source kinds a build knows, in the order messages
// list them.
type Kinds []SourceKind

// Lookup returns the kind named name.
func (ks Kinds) Lookup(name string) (SourceKind, bool) {
	i := slices.IndexFunc(ks, func(k SourceKind) bool { return k.Name() == name })
	if i < 0 {
		return nil, false
	}
	return ks[i], true
}

// Names lists the kinds' names.
func (ks Kinds) Names() []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Name()
	}
	return out
}

// Check collects the problems a kind finds in its part of a manifest;
// fields are relative to spec.source.<kind>.
type Check struct {
	v      *validator
	prefix string
}

func (c *Check) field(f string) string {
	if f == "" {
		return c.prefix
	}
	return c.prefix + "." + f
}

// Report records a problem with field (relative; "" for the member itself).
func (c *Check) Report(field, reason string) { c.v.report(c.field(field), reason) }

// Path requires an absolute, clean path; false if it is not one.
func (c *Check) Path(field, p string) bool {
	if r := checkPath(p); r != "" {
		c.Report(field, r)
		return false
	}
	return true
}

// Size parses a required size ("64Mi"); 0 after reporting a problem.
func (c *Check) Size(field, s string) int64 { return c.v.size(c.field(field), s) }

// Duration parses an optional duration ("30s"); 0 if empty or bad.
func (c *Check) Duration(field, s string) time.Duration { return c.v.duration(c.field(field), s) }

// SecretFile checks a file named as holding a secret.
func (c *Check) SecretFile(field, p string, required bool) {
	c.v.secretFile(c.field(field), p, required)
}

// HostPort requires host:port.
func (c *Check) HostPort(field, s string) {
	if r := checkHostPort(s); r != "" {
		c.Report(field, r)
	}
}

// Source is the one member of spec.source: Kind names it, Spec holds the
// kind's decoded value (its type belongs to the kind's package).
type Source struct {
	Kind string `yaml:"-" json:"-"`
	Spec any    `yaml:"-" json:"-"`
	// Caps is what the kind said of it once validated.
	Caps Caps `yaml:"-" json:"-"`
	// Staged: the kind puts the source at the staging path itself (no
	// block device), as its kind said once validated.
	Staged bool `yaml:"-" json:"-"`
	// more holds every member written: more than one is refused, each
	// still checked.
	more []member
}

type member struct {
	kind SourceKind
	spec any
}

// MarshalJSON writes the source as it is written in a manifest:
// {"loop": {...}}. The state file keeps it in attach intents.
func (s Source) MarshalJSON() ([]byte, error) {
	if s.Kind == "" {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]any{s.Kind: s.Spec})
}

// UnmarshalJSON reads what MarshalJSON wrote. Without the kinds at hand
// the member is kept as raw JSON; the kind decodes it (kinds.Spec).
func (s *Source) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if len(m) > 1 {
		return fmt.Errorf("source: more than one member")
	}
	*s = Source{}
	for k, v := range m {
		s.Kind, s.Spec = k, v
	}
	return nil
}

func oneOf(ks Kinds) string {
	if len(ks) == 0 {
		// A caller that passed no kinds: say so rather than list nothing.
		return "exactly one source kind (this loader was given none)"
	}
	return "exactly one of " + strings.Join(ks.Names(), ", ")
}
