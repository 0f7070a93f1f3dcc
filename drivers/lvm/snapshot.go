package lvm

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// SnapTagPrefix starts the tag of a thin snapshot volumed takes for a
// CSI snapshot: volumed-snap:<name>. It is not a volume's tag (Owner
// never reads it): a snapshot is no volume's LV until restored.
const SnapTagPrefix = "volumed-snap:"

// SnapTag is the tag of the snapshot LV name.
func SnapTag(name string) string { return SnapTagPrefix + name }

// SnapshotArgs makes name, a thin snapshot of from in vg, tagged tag,
// not activated: lvm2 marks a thin snapshot to be skipped at activation,
// and whoever uses it activates it with -K (ActivateArgs). A thin
// snapshot takes no extents: it shares the pool's blocks with from.
// It is lvcreate's form "--type thin LV" (a thin LV that is a snapshot
// of an existing thin LV): with --snapshot lvm2 asks for the old
// copy-on-write kind's kernel target (dm-snapshot), which volumed's unit
// cannot load (TestLVMThin's guest: "snapshot: Required device-mapper
// target(s) not detected"), and it refuses --snapshot with --type thin.
func SnapshotArgs(vg, from, name, tag string) []string {
	return []string{"lvcreate", "--yes", "--type", Thin, "--name", name, "--addtag", tag, "--activate", "n", vg + "/" + from}
}

// RemoveArgs removes lv (it must not be open: lvm2 refuses then).
func RemoveArgs(lv LV) []string {
	return []string{"lvremove", "--yes", lv.Ref()}
}

// Tagged is the one rule for "may volumed take or drop this LV by its
// name": it carries tag, and no other volumed tag of either kind.
func Tagged(lv LV, tag string) bool {
	ours := 0
	for _, t := range lv.Tags {
		if strings.HasPrefix(t, TagPrefix) || strings.HasPrefix(t, SnapTagPrefix) {
			ours++
		}
	}
	return ours == 1 && slices.Contains(lv.Tags, tag)
}

// byName is the LV of that name in lvs.
func byName(lvs []LV, name string) (LV, bool) {
	i := slices.IndexFunc(lvs, func(lv LV) bool { return lv.Name == name })
	if i < 0 {
		return LV{}, false
	}
	return lvs[i], true
}

// Snapshot makes name, a thin snapshot of from, tagged tag; done already
// when name is there with the tag (a call retried after a crash: lvcreate
// commits the LV and its tag at once). An LV of that name without the
// tag is someone else's, and refused.
func (t Tool) Snapshot(ctx context.Context, vg, from, name, tag string) error {
	lvs, found, err := t.LVs(ctx, vg)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("snapshot of %s/%s: volume group %s is not there", vg, from, vg)
	}
	if lv, ok := byName(lvs, name); ok {
		if Tagged(lv, tag) {
			return nil
		}
		return fmt.Errorf("snapshot of %s/%s: LV %s is already there and not tagged %s: volumed does not take it over", vg, from, lv.Ref(), tag)
	}
	origin, ok := byName(lvs, from)
	switch {
	case !ok:
		return fmt.Errorf("snapshot of %s/%s: no such LV", vg, from)
	case origin.Segtype != Thin:
		return fmt.Errorf("snapshot of %s: it is %s, not thin: volumed takes thin snapshots only", origin.Ref(), origin.Segtype)
	}
	_, err = t.run(ctx, "snapshot "+origin.Ref()+" as "+name, SnapshotArgs(vg, from, name, tag))
	return err
}

// Remove removes the LV name in vg when it carries tag; one already gone
// is removed (a call retried after a crash). An LV of that name without
// the tag is never removed, and an open one is busy (ErrBusy).
func (t Tool) Remove(ctx context.Context, vg, name, tag string) error {
	lvs, found, err := t.LVs(ctx, vg)
	if err != nil || !found {
		return err
	}
	lv, ok := byName(lvs, name)
	switch {
	case !ok:
		return nil
	case !Tagged(lv, tag):
		return fmt.Errorf("remove LV %s: it is not tagged %s (tags %v): volumed removes only its own", lv.Ref(), tag, lv.Tags)
	case lv.Open:
		return fmt.Errorf("remove LV %s: %w (mounted or held outside volumed)", lv.Ref(), ErrBusy)
	}
	_, err = t.run(ctx, "remove LV "+lv.Ref(), RemoveArgs(lv))
	return err
}
