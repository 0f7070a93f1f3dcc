package lvm

import (
	"fmt"
	"slices"
	"strings"
)

// TagPrefix starts the tag volumed puts on each LV it creates:
// volumed:<volume>.
const TagPrefix = "volumed:"

// Tag is the tag of the volume's LV.
func Tag(volume string) string { return TagPrefix + volume }

// Owner is the one rule for "whose is this LV": the volume its volumed
// tag names, "" for an LV volumed did not create (no such tag). Two
// volumed tags (made by hand) name no one: volumed cannot tell which
// volume it is.
func Owner(lv LV) string {
	owner, n := "", 0
	for _, t := range lv.Tags {
		if v, ok := strings.CutPrefix(t, TagPrefix); ok {
			owner, n = v, n+1
		}
	}
	if n != 1 {
		return ""
	}
	return owner
}

// Want is the LV a volume asks for.
type Want struct {
	Volume string // the volume's name: its LV's tag
	VG     string
	Name   string // the LV's name when volumed creates it
	Size   int64  // bytes, when volumed creates it
	// Extents sizes it instead of Size (lvm2's N%FREE, N%VG, N%PVS).
	Extents string
	// Follow: the LV follows its VG (source.lvm.grow): made of every
	// free extent (Extents is FollowExtents), extended by the free
	// extents the VG gains (FollowSize).
	Follow bool
	// Type is Linear ("" too), Striped, Raid1 or Thin; ThinPool the
	// pool of a thin LV.
	Type     string
	ThinPool string
	// ReadOnly: the VG is adopted (volumed did not create it): no LV is
	// created in it.
	ReadOnly bool
	// Stripes and StripeSize (bytes, 0: lvm2's default) of a striped
	// LV; Mirrors of a raid1 LV (copies besides the first, 0: 1).
	Stripes    int
	StripeSize int64
	Mirrors    int
}

// LV types volumed creates.
const (
	Linear  = "linear"
	Striped = "striped"
	Raid1   = "raid1"
	Thin    = "thin"
)

// thinPoolSegtype is lvs's segtype of a thin pool.
const thinPoolSegtype = "thin-pool"

// Ref is VG/NAME, for messages.
func (w Want) Ref() string { return w.VG + "/" + w.Name }

// Action is what Decide says to do.
type Action string

// Actions.
const (
	// Use the LV as it is: it is active.
	Use Action = "use"
	// Activate the LV (it is the volume's, inactive: a reboot).
	Activate Action = "activate"
	// Create the LV, tagged.
	Create Action = "create"
	// Wait: the VG is not there (yet), or the LV is not volumed's and
	// not active; Why says which. Nothing is changed.
	Wait Action = "wait"
	// Refuse: the LV that would be used is another volume's, or two
	// LVs claim this volume; Why says which. Nothing is changed.
	Refuse Action = "refuse"
)

// Step is Decide's answer.
type Step struct {
	Action Action
	LV     LV   // the LV to use or activate
	Owned  bool // volumed created it (it carries the volume's tag)
	Why    string
}

// Decide is what to do for w over what the VG holds now (vgFound: the
// VG is there; lvs: its LVs). The volume's LV is the one carrying its
// tag, whatever its name (a rename keeps it); only when none does is the
// name looked at: an LV of that name volumed did not create is used in
// place, never changed (not activated: that is its owner's policy), and
// one another volume's tag names is refused.
func Decide(w Want, vgFound bool, lvs []LV) Step {
	if !vgFound {
		return Step{Action: Wait, Why: fmt.Sprintf("volume group %s is not there: volumed uses an existing volume group (vgcreate it, or attach its disks)", w.VG)}
	}
	var tagged []LV
	for _, lv := range lvs {
		if Owner(lv) == w.Volume {
			tagged = append(tagged, lv)
		}
	}
	switch len(tagged) {
	case 0:
	case 1:
		lv := tagged[0]
		if lv.Active {
			return Step{Action: Use, LV: lv, Owned: true}
		}
		return Step{Action: Activate, LV: lv, Owned: true}
	default:
		names := make([]string, len(tagged))
		for i, lv := range tagged {
			names[i] = lv.Ref()
		}
		return Step{Action: Refuse, Why: fmt.Sprintf("LVs %s all carry the tag %s: volumed cannot tell which is volume %s's; remove the tag from the others (lvchange --deltag %s)",
			strings.Join(names, ", "), Tag(w.Volume), w.Volume, Tag(w.Volume))}
	}
	i := slices.IndexFunc(lvs, func(lv LV) bool { return lv.Name == w.Name })
	if i < 0 && w.ReadOnly {
		return Step{Action: Wait, Why: fmt.Sprintf("volume group %s was not created by volumed: it is used read-only, and LV %s is not in it; volumed creates no LV there", w.VG, w.Ref())}
	}
	if i < 0 {
		return create(w, lvs)
	}
	lv := lvs[i]
	if o := Owner(lv); o != "" {
		return Step{Action: Refuse, LV: lv, Why: fmt.Sprintf("LV %s is volume %s's (tag %s), not %s's: two volumes never share an LV", lv.Ref(), o, Tag(o), w.Volume)}
	}
	if hasTagPrefix(lv) {
		return Step{Action: Refuse, LV: lv, Why: fmt.Sprintf("LV %s carries more than one volumed tag (%s): volumed cannot tell whose it is", lv.Ref(), strings.Join(lv.Tags, ", "))}
	}
	if !lv.Active {
		return Step{Action: Wait, LV: lv, Why: fmt.Sprintf("LV %s was not created by volumed (no %s tag) and is not active: volumed uses it as it is and never activates it; activate it (lvchange -ay %s)", lv.Ref(), TagPrefix+"*", lv.Ref())}
	}
	return Step{Action: Use, LV: lv}
}

// create is Create, or a wait when a thin LV's pool is not in the VG
// (lvcreate would fail; the pool may be made yet).
func create(w Want, lvs []LV) Step {
	if w.Type != Thin {
		return Step{Action: Create}
	}
	i := slices.IndexFunc(lvs, func(lv LV) bool { return lv.Name == w.ThinPool })
	switch {
	case i < 0:
		return Step{Action: Wait, Why: fmt.Sprintf("thin pool %s/%s is not there: volumed makes thin LVs in an existing pool (lvcreate --type thin-pool)", w.VG, w.ThinPool)}
	case lvs[i].Segtype != thinPoolSegtype:
		return Step{Action: Refuse, Why: fmt.Sprintf("LV %s is %s, not a thin pool", lvs[i].Ref(), lvs[i].Segtype)}
	}
	return Step{Action: Create}
}

func hasTagPrefix(lv LV) bool {
	return slices.ContainsFunc(lv.Tags, func(t string) bool { return strings.HasPrefix(t, TagPrefix) })
}

// CheckName says what is wrong with a VG name, "" when lvm2 takes it:
// letters, digits and + _ . -, not starting with -, not . or .., at most
// 127 characters.
func CheckName(n string) string {
	switch {
	case n == "." || n == "..":
		return "must not be . or .."
	case strings.HasPrefix(n, "-"):
		return "must not start with -"
	case len(n) > 127:
		return "must be at most 127 characters"
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("+_.-", r)) {
			return fmt.Sprintf("%q is not allowed: LVM names take letters, digits and + _ . -", r)
		}
	}
	return ""
}

// CheckLVName is CheckName for an LV, which also must not hold the words
// lvm2 keeps for its own sub-LVs.
func CheckLVName(n string) string {
	if why := CheckName(n); why != "" {
		return why
	}
	for _, w := range reserved {
		if strings.Contains(n, w) {
			return fmt.Sprintf("must not contain %q: lvm2 keeps it for its own volumes", w)
		}
	}
	return ""
}

var reserved = []string{"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_wcorig", "_mimage", "_mlog", "_pmspare",
	"_rimage", "_rmeta", "_tdata", "_tmeta", "_vdata", "_vorigin", "_imeta", "_iorig", "snapshot", "pvmove"}
