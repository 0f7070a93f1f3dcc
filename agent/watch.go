// Manifest directory watches and kernel events that wake the reconciler.

package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// wake handles a kernel event: volumes it may unblock retry now. It
// reports whether the event concerned anything of ours (a pass is due).
func (a *Agent) wake(ctx context.Context, w Wake) bool {
	// Only the records the event may concern are copied: a uevent comes
	// with every attach and detach, and copying every record for each
	// was a tenth of the agent's CPU bringing a thousand volumes up. The
	// device's facts are read only for a volume that waits.
	var retried []string
	facts := a.eventFacts(w.Facts)
	for n, d := range a.desiredSnapshot() {
		if !d.Wanted() || !slices.Contains(w.Drivers, d.Kind) {
			continue
		}
		if rec := a.state.Get(n); rec != nil && rec.Staging != nil && len(rec.Targets) == len(d.Targets) {
			continue // converged: nothing to retry
		}
		if ev := facts(); ev != nil && !decide.Concerns(*ev, a.waits.of(n)) {
			continue // nothing it waits for: its backoff stands
		}
		a.exec.Reset(n)
		a.dirty.mark(n)
		retried = append(retried, n)
	}
	sort.Strings(retried)
	if len(retried) > 0 {
		a.cfg.Log.Info("kernel event: retrying waiting volumes now", "reason", w.Reason, "volumes", retried)
	} else {
		a.cfg.Log.Debug("kernel event", "reason", w.Reason)
	}
	joining := a.askJoinChecks(w.Drivers, func() bool { return mayBringDisk(w, facts()) })
	grown := w.Grow && a.refreshPartitionsOf(ctx, w.Device)
	if w.Device != "" && !a.holdsDevice(w.Device) {
		// No volume holds a PV (the drift check below would check the
		// sources of one that does): a volume on a raid1 LV whose leg
		// went would stay Ready until the resync's health check.
		checked := w.Unplugged && a.checkSourcesNow(ctx)
		return len(retried) > 0 || grown || joining || checked
	}
	if w.Verify {
		a.verify(ctx)
	}
	if w.Grow {
		a.askGrowthCheckOf(w.Device)
	}
	return len(retried) > 0 || w.Verify || w.Grow || joining
}

// mayBringDisk: the event may be a disk a source that takes new disks in
// could take (decide.Concerns, as for a volume waiting for any disk),
// not volumed's own device, an LV, a held or an empty one: each join
// check runs lvm2 over every disk. Without facts, any device added.
func mayBringDisk(w Wake, ev *DeviceEvent) bool {
	if ev == nil {
		return w.Added
	}
	return decide.Concerns(*ev, &Awaited{AnyDisk: true})
}

// askJoinChecks asks a growth check of each wanted volume of drivers
// whose source takes new disks in (Joiner), when the event may bring one
// (mayBring, asked only if there is such a volume): a disk that appeared
// may be one its VG grows onto, at once rather than at the next resync.
// It reports whether any was asked.
func (a *Agent) askJoinChecks(drivers []string, mayBring func() bool) bool {
	asked := false
	for n, d := range a.desiredSnapshot() {
		if !d.Wanted() || !slices.Contains(drivers, d.Kind) {
			continue
		}
		if _, ok := a.cfg.Attachers[d.Kind].(Joiner); ok && mayBring() {
			a.askGrowthCheckOfVolume(n)
			asked = true
		}
	}
	return asked
}

// refreshPartitionsOf handles a disk that changed under volumes on its
// partitions: the event names the disk, which no volume holds, and a
// partition taking the rest of it grows only when its attacher's Refresh
// rewrites the table. That is done now, as the resync would, and their
// growth checked. It reports whether any volume was on the disk.
func (a *Agent) refreshPartitionsOf(ctx context.Context, disk string) bool {
	if disk == "" {
		return false
	}
	on := a.state.Find(func(rec *store.Volume) bool {
		at := rec.Attachment
		return at != nil && rec.Staging != nil && partitionOf(filepath.Base(at.Device), disk)
	})
	for _, rec := range on {
		name, at := rec.Name, rec.Attachment
		if r, ok := a.cfg.Attachers[at.Kind].(Refresher); ok {
			if err := r.Refresh(ctx, *at); err != nil {
				a.cfg.Log.Warn("refresh a partition whose disk changed", "volume", name, "disk", disk, "error", err)
			}
		}
		a.askGrowthCheckOf(filepath.Base(at.Device))
	}
	return len(on) > 0
}

// partitionOf tells whether part is a partition of disk by the kernel's
// naming: disk+N, or disk+"p"+N when the disk's name ends in a digit
// (nvme0n1p2, mmcblk0p1).
func partitionOf(part, disk string) bool {
	rest, ok := strings.CutPrefix(part, disk)
	if !ok || disk == "" {
		return false
	}
	if last := disk[len(disk)-1]; last >= '0' && last <= '9' {
		if rest, ok = strings.CutPrefix(rest, "p"); !ok {
			return false
		}
	}
	if rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// eventFacts is the event's facts, read when first asked for and
// completed with the agent's own (a device a record holds is volumed's);
// nil when the wake has none.
func (a *Agent) eventFacts(read func() *DeviceEvent) func() *DeviceEvent {
	return sync.OnceValue(func() *DeviceEvent {
		if read == nil {
			return nil
		}
		ev := read()
		if ev == nil {
			return nil
		}
		e := *ev
		e.Ours = e.Ours || a.holdsDevice(e.Name)
		return &e
	})
}

func (a *Agent) holdsDevice(name string) bool {
	return len(a.state.Find(func(rec *store.Volume) bool {
		return rec.Attachment != nil && filepath.Base(rec.Attachment.Device) == name
	})) > 0
}

// watch starts an fsnotify watcher on the manifest directories that
// exist; directories that appear later are picked up at resync.
func (a *Agent) watch() *fsnotify.Watcher {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		a.cfg.Log.Warn("cannot watch manifest directories; relying on resync", "error", err)
		return nil
	}
	a.addWatches(w)
	return w
}

func (a *Agent) addWatches(w *fsnotify.Watcher) {
	if w == nil {
		return
	}
	have := w.WatchList()
	for _, d := range a.cfg.WatchDirs {
		if slices.Contains(have, d) {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			if err := w.Add(d); err != nil {
				a.cfg.Log.Warn("watch manifest directory", "dir", d, "error", err)
			}
		}
	}
}
