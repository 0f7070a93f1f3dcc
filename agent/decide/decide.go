package decide

import (
	"sort"

	"github.com/volumed/volumed/store/record"
)

// Observations are what a pass read of the world besides the records,
// before deciding anything: reading decides nothing, and deciding reads
// nothing.
type Observations struct {
	// Running and BackingChanged are noted of the volumes a growth check
	// was asked for. Running: an operation is in flight. BackingChanged:
	// the image file is no longer the one the device reads, so growing
	// it would grow the wrong file.
	Running        map[string]bool
	BackingChanged map[string]bool
	// Sizes: the volumes whose growth was checked this pass (a check is
	// asked for at resync, on device events and on manifest changes).
	Sizes map[string]Sizes
}

// Decision is everything one pass does.
type Decision struct {
	// Ops are the operations, in the order to start them.
	Ops []Op
	// GrowSettled: volumes checked and found needing no growth; a
	// failure of an earlier grow no longer matters.
	GrowSettled []string
	// ShrinkRefused: volumes checked whose manifest asks for a size
	// under their source's (ShrinkRefused says which kinds refuse it).
	ShrinkRefused []Shrink
	// Pending: the manifest changes that are not in effect, by volume
	// (PendingChanges); a wanted volume missing here has none.
	Pending map[string][]Pending
}

// Decide is the whole of a pass's decision, from desired and actual
// state and what was observed: Plan's next step of every volume, the
// manifest changes that wait (PendingChanges), then a grow of each
// converged volume whose sizes say so. Like Plan it is pure. Four
// decisions are taken inside their operations instead, because each
// rests on what was read right before acting, under the volume's intent:
// format-or-not (Mkfs and Resume, over the probe), encrypt-or-not
// (Encrypt, over the probe and the LUKS2 header), whose data the device
// holds (Identity, over the UUID read before a mount or open) and
// release-or-not of a shared kernel object (MayRelease, before a
// detach). They are in this package all the same.
func Decide(desired map[string]*Desired, actual map[string]*record.Volume, obs Observations) Decision {
	dec := Decision{Ops: Plan(desired, actual), Pending: map[string][]Pending{}}
	for n, d := range desired {
		if p := PendingChanges(d, actual[n]); len(p) > 0 {
			dec.Pending[n] = p
		}
	}
	planned := map[string]bool{}
	for _, op := range dec.Ops {
		planned[op.Volume] = true
	}
	dec.grow(desired, actual, obs, func(n string) bool { return planned[n] })
	return dec
}

// grow adds a grow of each converged volume whose sizes obs says call
// for one (none of a volume with a step planned), or says why not.
func (dec *Decision) grow(desired map[string]*Desired, actual map[string]*record.Volume, obs Observations, planned func(string) bool) {
	if len(obs.Sizes) == 0 {
		return
	}
	names := make([]string, 0, len(obs.Sizes))
	for n := range obs.Sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := desired[n]
		if d == nil || planned(n) || obs.Running[n] || obs.BackingChanged[n] {
			continue
		}
		switch {
		case GrowNeeded(d, actual[n], obs.Sizes[n]):
			dec.Ops = append(dec.Ops, Op{Volume: n, Name: OpGrow})
		case ShrinkAsked(d, actual[n], obs.Sizes[n]):
			dec.ShrinkRefused = append(dec.ShrinkRefused, Shrink{Volume: n, Have: obs.Sizes[n].Image, Want: obs.Sizes[n].wanted(d)})
		default:
			dec.GrowSettled = append(dec.GrowSettled, n)
		}
	}
}

// Sizes is what a growth check saw of one volume.
type Sizes struct {
	Device int64 // the block device now
	// Image is the size of what the kind keeps at Caps.Size (a loop
	// image file, an LV) now, -1 when it keeps none.
	Image int64
	// Want is Caps.Size as the source rounds it (an LV's extents); 0:
	// Caps.Size as it is.
	Want int64
	// Join: a new disk is there to join the source (a VG volumed keeps
	// with grow: true), which the grow operation takes in.
	Join bool
}

// wanted is the size the source is kept at.
func (s Sizes) wanted(d *Desired) int64 {
	if s.Want > 0 {
		return s.Want
	}
	return d.Caps.Size
}

// Shrink is a size asked for under the source's present one.
type Shrink struct {
	Volume     string
	Have, Want int64 // bytes
}

// ShrinkAsked: the manifest of a converged volume whose kind refuses a
// shrink (Caps.RefuseShrink: an LV's size is the LV's own) asks for less
// than its source has. Nothing shrinks a source; this says so, where a
// loop image's smaller size only sizes a file no longer to be made.
func ShrinkAsked(d *Desired, rec *record.Volume, now Sizes) bool {
	return d.Wanted() && Placed(d, rec) && d.Caps.RefuseShrink && d.Caps.Size > 0 && now.Image > now.wanted(d)
}

// GrowNeeded decides, from what the manifest wants, what was recorded and
// what the kernel says now, whether a converged volume should grow: its
// loop image is smaller than the manifest's size, or its device is larger
// than when the filesystem was last grown and the manifest asks for
// growth. It never asks for shrinking.
func GrowNeeded(d *Desired, rec *record.Volume, now Sizes) bool {
	if !d.Wanted() || !Placed(d, rec) {
		return false
	}
	if now.Join || d.Caps.Size > 0 && now.Image >= 0 && now.Image < now.wanted(d) {
		return true
	}
	fs := d.Spec.Filesystem
	return fs != nil && fs.Grow && now.Device > 0 && now.Device > rec.Staging.DeviceBytes
}

// Placed: the volume is where growing it makes sense: attached and
// staged, or attached when it is a raw block volume (its loop image
// grows; there is no filesystem).
func Placed(d *Desired, rec *record.Volume) bool {
	return rec != nil && rec.Attachment != nil && (rec.Staging != nil || d != nil && d.Block)
}
