// Manifest directory watches and kernel events that wake the reconciler.

package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/fsnotify/fsnotify"
	"github.com/volumed/volumed/store"
)

// wake handles a kernel event: volumes it may unblock retry now. It
// reports whether the event concerned anything of ours (a pass is due).
func (a *Agent) wake(ctx context.Context, w Wake) bool {
	actual := a.state.Snapshot()
	var retried []string
	for n, d := range a.desiredSnapshot() {
		if !d.Wanted() || !slices.Contains(w.Drivers, d.Driver) {
			continue
		}
		if rec := actual[n]; rec != nil && rec.Staging != nil && len(rec.Targets) == len(d.Targets) {
			continue // converged: nothing to retry
		}
		a.exec.Reset(n)
		retried = append(retried, n)
	}
	sort.Strings(retried)
	if len(retried) > 0 {
		a.cfg.Log.Info("kernel event: retrying waiting volumes now", "reason", w.Reason, "volumes", retried)
	} else {
		a.cfg.Log.Debug("kernel event", "reason", w.Reason)
	}
	if w.Device != "" && !holdsDevice(actual, w.Device) {
		return len(retried) > 0
	}
	if w.Verify {
		a.verify(ctx)
	}
	if w.Grow {
		a.askGrowthCheckOf(w.Device)
	}
	return len(retried) > 0 || w.Verify || w.Grow
}

func holdsDevice(actual map[string]*store.Volume, name string) bool {
	for _, rec := range actual {
		if rec.Attachment != nil && filepath.Base(rec.Attachment.Device) == name {
			return true
		}
	}
	return false
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
