package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/device"
	"github.com/volumed/volumed/drivers/wipe"
	"github.com/volumed/volumed/firmware"
	"github.com/volumed/volumed/store"
)

// cmdWipe makes a device blank for reuse: it prints what it would do,
// and does it only with --yes. See drivers/wipe for what it refuses.
func cmdWipe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wipe", flag.ContinueOnError)
	volume := fs.String("volume", "", "wipe the device a former volume of this name used, found in the state (after its manifest is gone)")
	stateDir := fs.String("state-dir", "/var/lib/volumed", "the agent's state directory")
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent (for the volumes it holds)")
	yes := fs.Bool("yes", false, "do it (without it, only print what would be done)")
	firmwareRoot := fs.String("firmware-root", "/", "root of the tree holding /sys/firmware (the boot volumes that are never wiped)")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if (len(names) == 1) == (*volume != "") || len(names) > 1 {
		return errors.New("usage: volumed wipe [--yes] DEVICE | --volume NAME")
	}
	snap, err := store.ReadSnapshot(filepath.Join(*stateDir, "state.db"))
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return fmt.Errorf("read the state (needed to refuse a volume's device): %w", err)
	}
	dev := ""
	if len(names) == 1 {
		dev = names[0]
	} else if dev, err = formerDevice(snap, *volume, stdout); err != nil {
		return err
	}
	boot, err := firmware.BootVolumes(*firmwareRoot)
	if err != nil {
		return fmt.Errorf("read the firmware's boot volumes (a boot device is never wiped): %w", err)
	}
	o := wipe.Options{Boot: boot}
	t, err := wipe.Gather(ctx, dev, o)
	if err != nil {
		return err
	}
	t.Volumes = holdingVolumes(ctx, t, snap, *socket)
	if err := wipe.Refuse(t); err != nil {
		return err
	}
	steps := wipe.Plan(t)
	if !*yes {
		fmt.Fprintf(stdout, "volumed wipe %s would:\n", t.Device)
		for _, s := range steps {
			fmt.Fprintln(stdout, "  -", s.Says)
		}
		fmt.Fprintln(stdout, "Nothing was done. Every byte on", t.Device, "is lost if you run it again with --yes.")
		return nil
	}
	if err := wipe.Do(ctx, t, steps, o, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, t.Device, "is blank: volumed may format it now")
	return nil
}

// formerDevice is the device a volume no manifest wants any more last
// used, by its recorded identity where that finds a disk.
func formerDevice(snap store.Snapshot, name string, stdout io.Writer) (string, error) {
	if _, ok := snap.Volumes[name]; ok {
		return "", fmt.Errorf("%w: volume %s is still in the state; remove its manifest and let the agent tear it down first", wipe.ErrRefused, name)
	}
	f, ok := snap.Former[name]
	if !ok {
		return "", fmt.Errorf("the state has no device of a volume %s", name)
	}
	a := f.Attachment
	if a.Kind == "loop" {
		return "", fmt.Errorf("volume %s was a loop image (%s): nothing to wipe; delete the image file if nothing in it is wanted", name, a.Identity)
	}
	if sel, err := device.ParseIdentity(a.Identity); err == nil {
		if d, found, err := (device.Finder{}).Find(sel); err == nil && found {
			fmt.Fprintf(stdout, "volume %s used %s (%s) until %s\n", name, d.Device, a.Identity, f.At.Format(time.RFC3339))
			return d.Device, nil
		}
		return "", fmt.Errorf("volume %s used %s, which is not on this host now", name, a.Identity)
	}
	fmt.Fprintf(stdout, "volume %s used %s until %s (its identity %q names no disk: the path is the record's)\n", name, a.Device, f.At.Format(time.RFC3339), a.Identity)
	return a.Device, nil
}

// holdingVolumes are the volumes of the state and of the running agent
// whose device is the target or one of its partitions.
func holdingVolumes(ctx context.Context, t wipe.Target, snap store.Snapshot, socket string) []string {
	devs := append([]string{t.Device}, t.Partitions...)
	var out []string
	add := func(name, dev string) {
		if dev != "" && slices.Contains(devs, dev) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for name, v := range snap.Volumes {
		if v.Attachment != nil {
			add(name, v.Attachment.Device)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if st, err := api.NewClient(socket).Status(ctx); err == nil {
		for _, v := range st.Volumes {
			add(v.Name, v.Device)
		}
	}
	slices.Sort(out)
	return out
}
