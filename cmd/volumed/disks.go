package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/disk"
	"github.com/volumed/volumed/internal/blank"
)

// diskRow is one disk of `volumed disks`: its facts as a selector sees
// them, and the volumes on it when the agent is running.
type diskRow struct {
	disk.Facts
	Volumes []string `json:"volumes"`
}

// cmdDisks lists every disk with its facts; --match tries a selector.
// It reads the disks itself (root, to look at their sectors) and asks a
// running agent which volumes are on them; with no agent it shows the
// facts alone.
func cmdDisks(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("disks", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent (for the volumes on each disk)")
	output := fs.String("o", "table", "table or json")
	match := fs.String("match", "", "a disk selector (CEL) to try: which disk it picks, and why not the others")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o must be table or json, got %q", *output)
	}
	var sel *disk.Selector
	if *match != "" {
		var err error
		if sel, err = disk.Compile(*match); err != nil {
			return fmt.Errorf("--match: %w", err)
		}
	}
	facts, err := disk.Lister{}.List(ctx)
	if err != nil {
		return err
	}
	rows := make([]diskRow, len(facts))
	held := volumesOn(ctx, *socket, facts)
	for i, f := range facts {
		rows[i] = diskRow{Facts: f, Volumes: held[f.Path]}
		if rows[i].Volumes == nil {
			rows[i].Volumes = []string{}
		}
	}
	var selection disk.Selection
	if sel != nil {
		selection = sel.Select(facts)
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if sel != nil {
			return enc.Encode(selection)
		}
		return enc.Encode(rows)
	}
	printDisks(stdout, rows, selection, sel != nil)
	return nil
}

// volumesOn maps each disk's path to the volumes whose device is the
// disk or one of its partitions, from the running agent's status. With
// no agent (or one that does not answer at once) the map is empty: the
// listing is of facts, which need no agent.
func volumesOn(ctx context.Context, socket string, disks []disk.Facts) map[string][]string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := api.NewClient(socket).Status(ctx)
	if err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, v := range st.Volumes {
		if v.Device == "" {
			continue
		}
		for _, d := range disks {
			on := v.Device == d.Path
			for _, p := range d.Partitions {
				on = on || v.Device == p.Path
			}
			if on {
				out[d.Path] = append(out[d.Path], v.Name)
			}
		}
	}
	return out
}

// printDisks fits 80 columns; the full facts are in -o json.
func printDisks(w io.Writer, rows []diskRow, sel disk.Selection, tried bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "PATH\tSIZE\tTRAN\tKIND\tCONTENT\tMODEL\tSERIAL\tVOLUMES"
	if tried {
		head = "PATH\tSIZE\tTRAN\tKIND\tCONTENT\tMODEL\tSERIAL\tMATCH"
	}
	fmt.Fprintln(tw, head)
	for i, r := range rows {
		last := cut(strings.Join(r.Volumes, ","), 16)
		if tried {
			last = "no"
			if sel.Verdicts[i].Match {
				last = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Path, humanBytes(r.Size), dash(r.Transport), medium(r.Facts),
			cut(content(r.Facts), 14), cut(r.Model, 16), cut(r.Serial, 14), last)
	}
	tw.Flush()
	if !tried {
		return
	}
	fmt.Fprintln(w)
	if sel.Chosen != nil {
		fmt.Fprintln(w, "picks", sel.Why)
	} else {
		fmt.Fprintln(w, "picks nothing:")
	}
	for _, v := range sel.Verdicts {
		if !v.Match {
			fmt.Fprintf(w, "  %s: %s\n", v.Disk.Path, v.Why)
		}
	}
}

// medium is the table's word for the medium and its flags.
func medium(f disk.Facts) string {
	k := "ssd"
	if f.Rotational {
		k = "hdd"
	}
	if f.Removable {
		k += ",rm"
	}
	if f.ReadOnly {
		k += ",ro"
	}
	return k
}

// notBlankWords fit the table's column: the blank rule's reasons when
// no signature names what is there.
var notBlankWords = map[string]string{
	blank.ReasonUnknownData: "unknown data", blank.ReasonHeld: "held",
	blank.ReasonNotRead: "unread", blank.ReasonPartitions: "kernel parts",
}

// content says what is on the disk: blank, what the look found, or why
// it could not look.
func content(f disk.Facts) string {
	switch {
	case f.ProbeError != "":
		return "unreadable"
	case f.Blank:
		return "blank"
	case len(f.Signatures) == 0 && len(f.Partitions) == 0:
		return notBlankWords[f.NotBlank] // data no signature explains, or a holder
	case len(f.Partitions) > 0:
		return fmt.Sprintf("%s, %d part", strings.Join(f.Signatures, ","), len(f.Partitions))
	}
	return strings.Join(f.Signatures, ",")
}
