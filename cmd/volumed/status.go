package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds"
)

func cmdStatus(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent")
	output := fs.String("o", "table", "table or json")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o must be table or json, got %q", *output)
	}
	st, err := api.NewClient(*socket).Status(ctx)
	if err != nil {
		return err
	}
	vols := st.Volumes
	if len(names) > 0 {
		vols = nil
		for _, n := range names {
			i := slices.IndexFunc(st.Volumes, func(v api.Volume) bool { return v.Name == n })
			if i < 0 {
				return fmt.Errorf("no volume named %q", n)
			}
			vols = append(vols, st.Volumes[i])
		}
	}
	if *output == "json" {
		if vols == nil {
			vols = []api.Volume{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(vols)
	}
	if len(names) > 0 {
		for i, v := range vols {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			describe(stdout, v)
		}
		return nil
	}
	printTable(stdout, vols)
	if st.StateRecovery != "" {
		fmt.Fprintln(stdout, "\nWARNING:", st.StateRecovery)
	}
	if len(st.Problems) > 0 {
		fmt.Fprintf(stdout, "\n%d manifest problem(s):\n", len(st.Problems))
		for _, p := range st.Problems {
			fmt.Fprintln(stdout, "  "+p)
		}
	}
	printHost(stdout, st)
	return nil
}

// printHost shows who this host is to storage targets, and what it
// booted from (pinned).
func printHost(w io.Writer, st *api.Status) {
	h := st.Host
	fmt.Fprintln(w)
	// Where a name came from is shown when it fits in 80 columns
	// (`status -o json` of the API always has it).
	line := func(label, name, from string) {
		if name == "" {
			return
		}
		s := label + name
		if t := s + " (" + from + ")"; len(t) <= 80 {
			s = t
		}
		fmt.Fprintln(w, s)
	}
	line("iSCSI initiator: ", h.InitiatorName, h.InitiatorNameFrom)
	line("NVMe host: ", h.HostNQN, h.HostNQNFrom)
	for _, b := range st.BootVolumes {
		fmt.Fprintf(w, "booted from:     %s, %s (pinned: never torn down)\n", b.From, b.Target)
	}
	if st.NetworkHeld {
		fmt.Fprintln(w, "network volumes: held down by `volumed shutdown --network`")
	}
}

// printTable fits an 80-column terminal: long errors are cut, the full
// text is in `status NAME` and `-o json`.
func printTable(w io.Writer, vols []api.Volume) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tDRIVER\tDEVICE\tTARGETS\tSIZE\tREASON")
	for _, v := range vols {
		mounted := 0
		for _, t := range v.Targets {
			if t.Mounted {
				mounted++
			}
		}
		size := "-"
		if v.CapacityBytes > 0 {
			size = humanBytes(v.CapacityBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", v.Name, v.Phase, v.Driver, dash(v.Device), mounted, len(v.Targets), size, cut(reason(v), 24))
	}
	tw.Flush()
}

// reason is the table's one word on what is wrong: the first condition
// (the oldest), else the last error.
func reason(v api.Volume) string {
	if len(v.Conditions) > 0 {
		r := v.Conditions[0].Reason
		if n := len(v.Conditions); n > 1 {
			r += fmt.Sprintf(" (+%d)", n-1)
		}
		return r
	}
	return v.LastError
}

func describe(w io.Writer, v api.Volume) {
	fmt.Fprintf(w, "Name:      %s\nPhase:     %s\nDriver:    %s\nManifest:  %s\nDevice:    %s\nStaging:   %s\n",
		v.Name, v.Phase, v.Driver, dash(v.File), dash(v.Device), v.StagingPath)
	if v.CapacityBytes > 0 {
		fmt.Fprintf(w, "Usage:     %s used of %s\n", humanBytes(v.UsedBytes), humanBytes(v.CapacityBytes))
	}
	if v.Pinned {
		fmt.Fprintln(w, "Pinned:    yes, the host booted from it: never torn down")
	}
	if v.SourceDetail != "" {
		fmt.Fprintf(w, "Source:    %s\n", v.SourceDetail)
	}
	if e := v.Encryption; e != nil {
		fmt.Fprintf(w, "Encrypted: %s\n", encryptionLine(e))
	}
	fmt.Fprintln(w, "Targets:")
	for _, t := range v.Targets {
		state := "not mounted"
		if t.Mounted {
			state = "mounted"
		}
		mode := "rw"
		if t.ReadOnly {
			mode = "ro"
		}
		sub := ""
		if t.SubPath != "" {
			sub = " subPath=" + t.SubPath
		}
		fmt.Fprintf(w, "  %s (%s, %s%s)\n", t.Path, mode, state, sub)
	}
	if len(v.Conditions) > 0 {
		fmt.Fprintln(w, "Conditions:")
		for _, c := range v.Conditions {
			fmt.Fprintf(w, "  %s  %s (since %s)\n    %s\n", c.Type, c.Reason, c.Since.Format(time.RFC3339), c.Message)
		}
	}
	if v.LastError != "" {
		fmt.Fprintf(w, "Error:     %s\nRetries:   %d", v.LastError, v.Retries)
		if v.NextRetryAt != nil {
			fmt.Fprintf(w, " (next at %s)", v.NextRetryAt.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Events:")
	if len(v.Events) == 0 {
		fmt.Fprintln(w, "  <none>")
	}
	for _, e := range v.Events {
		line := fmt.Sprintf("  %s  %-14s %-7s %8.3fs", e.Time.Format("15:04:05.000"), e.Op, e.Result, e.Duration)
		if e.Error != "" {
			line += "  " + e.Error
		}
		fmt.Fprintln(w, line)
	}
}

// encryptionLine says how an encrypted volume stands and which kind of
// key opened it; the status never holds a key to show.
func encryptionLine(e *api.Encryption) string {
	switch e.State {
	case api.EncryptionOpen:
		by := "found open at start-up"
		if e.KeyKind != "" {
			by = "opened by its " + e.KeyKind + " key"
		}
		return fmt.Sprintf("LUKS2 %s, open as %s (%s)", e.UUID, e.Mapping, by)
	case api.EncryptionLocked:
		return "LUKS2, locked: no key opens it (see the Locked condition)"
	}
	return "LUKS2, not open"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cut(s string, n int) string {
	if len(s) <= n {
		return dash(s)
	}
	return s[:n-3] + "..."
}

func humanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ci", float64(b)/float64(div), "KMGTPE"[exp])
}

func cmdWait(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	failMissing := fs.Bool("fail-missing", false, "fail at once when no manifest defines a named volume, instead of waiting for one to appear")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("wait: name at least one volume")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	client := api.NewClient(*socket)
	var why []string
	told := map[string]bool{}
	// Between attempts that failed (the agent not up yet) and, with an
	// agent older than GET /v1/wait, between status polls.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	progress := newWaitProgress(stderr, time.Now())
	defer progress.done()
	// longPoll once a status read worked; never with an agent that has
	// no GET /v1/wait (older: an upgrade under way).
	longPoll, legacy := false, false
	for {
		st, err := waitStep(ctx, client, names, longPoll)
		if errors.Is(err, api.ErrNoWait) {
			longPoll, legacy = false, true
			continue
		}
		switch {
		case errors.Is(err, iofs.ErrPermission):
			return err // only running as root helps, not waiting
		case err != nil:
			why = []string{err.Error()}
			longPoll = false
		default:
			missing := api.Missing(st, names)
			if len(missing) > 0 && *failMissing {
				return exitError{code: 1, msg: "volumed wait: no manifest defines volume " + strings.Join(missing, ", ")}
			}
			// A unit may wait for a volume whose manifest is still to be
			// dropped in (provisioning): say so once, then keep waiting.
			for _, n := range missing {
				if !told[n] {
					told[n] = true
					progress.done()
					fmt.Fprintf(stderr, "no manifest defines volume %s (yet); waiting\n", n)
				}
			}
			why = api.NotReady(st, names)
			if len(why) == 0 {
				return nil
			}
		}
		progress.show(why, time.Now())
		if ctx.Err() != nil {
			return exitError{code: 1, msg: fmt.Sprintf("volumed wait: timed out after %s:\n  %s", *timeout, strings.Join(why, "\n  "))}
		}
		if err == nil && !longPoll && !legacy {
			// A status read that worked: from now on the agent wakes us.
			longPoll = true
			continue
		}
		select {
		case <-ctx.Done():
			return exitError{code: 1, msg: fmt.Sprintf("volumed wait: timed out after %s:\n  %s", *timeout, strings.Join(why, "\n  "))}
		case <-tick.C:
		}
	}
}

// waitStep reads the named volumes' status: at once, or (longPoll) once
// they are ready or a window has passed, the agent waking the call after
// each pass. Each call gets its own bound, so that the last reason seen
// is what a timeout reports, not the cut-short call.
func waitStep(ctx context.Context, client *api.Client, names []string, longPoll bool) (*api.Status, error) {
	if !longPoll {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return client.Status(cctx)
	}
	window := waitWindow
	if dl, ok := ctx.Deadline(); ok {
		window = min(window, max(time.Until(dl), 100*time.Millisecond))
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), window+2*time.Second)
	defer cancel()
	return client.WaitReady(cctx, names, window)
}

// waitWindow is how long one long poll lasts: the progress line shows
// the reasons at least this often.
const waitWindow = 10 * time.Second

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "/var/lib/volumed", "the agent's state dir (targets on or under it are refused)")
	strict := fs.Bool("strict", false, "exit 1 on a warning too (a program or kernel feature this host lacks)")
	paths, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(paths) == 0 {
		fmt.Fprintln(stderr, "usage: volumed validate [--strict] [--state-dir DIR] PATH...")
		return 2
	}
	// Ownership is checked as root only: an image build tree may belong
	// to the builder, and the agent checks again on the host.
	ks := kinds.All()
	vols, probs := manifest.ValidateVolumes(paths, manifest.Options{StateDir: *stateDir, CheckOwnership: os.Geteuid() == 0, Kinds: kinds.Manifest(ks)})
	failed, warned := 0, 0
	for _, p := range probs {
		if p.Warning {
			fmt.Fprintln(stderr, "warning:", p.Error())
			warned++
			continue
		}
		fmt.Fprintln(stderr, p.Error())
		failed++
	}
	// Images are often validated on a build host: what this host lacks
	// is a warning unless --strict.
	warned += hostWarnings(hostcheck.Local(), ks, vols, stderr)
	if failed > 0 || (*strict && warned > 0) {
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}

// cmdShutdown is `volumed shutdown --network`, run by the unit that is
// stopped before the network at poweroff. A missing agent is not an
// error: there is then nothing mounted by it to take down in time.
func cmdShutdown(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("shutdown", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent")
	network := fs.Bool("network", false, "tear down the network volumes (iSCSI, NVMe-oF)")
	timeout := fs.Duration("timeout", 90*time.Second, "give up after this long")
	undo := fs.Bool("undo", false, "set the network volumes up again (after a shutdown --network that was not followed by a poweroff)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*network || fs.NArg() > 0 {
		return fmt.Errorf("shutdown: only --network is supported (the agent itself never unmounts on exit)")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	notRunning := func() bool {
		_, serr := os.Stat(*socket)
		return errors.Is(serr, os.ErrNotExist)
	}
	if *undo {
		if err := api.NewClient(*socket).ResumeNetwork(ctx); err != nil && !notRunning() {
			return err
		}
		return nil
	}
	r, err := api.NewClient(*socket).ShutdownNetwork(ctx)
	if err != nil {
		if notRunning() {
			fmt.Fprintln(stdout, "volumed is not running; nothing to take down")
			return nil
		}
		return err
	}
	fmt.Fprintf(stdout, "network volumes down: %s\n", listOrNone(r.Down))
	if len(r.Pinned) > 0 {
		fmt.Fprintf(stdout, "pinned (the host booted from them), left up: %s\n", listOrNone(r.Pinned))
	}
	if len(r.Remaining) > 0 {
		return exitError{code: 1, msg: "still up:\n  " + strings.Join(r.Remaining, "\n  ")}
	}
	return nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
