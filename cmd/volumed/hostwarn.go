package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// hostWarnings writes a warning for each thing the volumes vols (as
// validate accepted them, of the kinds ks) need that host lacks, as file:line:col: field:
// reason, and returns how many it wrote.
func hostWarnings(h hostcheck.Host, ks []kind.Kind, vols []*manifest.Object, stderr io.Writer) int {
	n := 0
	warn := func(o *manifest.Object, field string, lacks []hostcheck.Lack) {
		for _, l := range lacks {
			p := o.ProblemAt(field, "volume "+o.Metadata.Name+": "+l.String())
			fmt.Fprintln(stderr, "warning: "+p.Error())
			n++
		}
	}
	for _, o := range vols {
		v := o.Volume
		if v == nil {
			continue
		}
		if v.Filesystem != nil && v.Filesystem.Type != "" {
			warn(o, "spec.filesystem.type", h.Filesystem(v.Filesystem.Type))
		}
		if e := v.Encryption; e != nil && e.LUKS2 != nil {
			tpm2 := slices.ContainsFunc(e.LUKS2.Keys, manifest.LUKS2Key.UsesTPM2)
			warn(o, "spec.encryption", h.Encryption(tpm2))
		}
		for _, k := range ks {
			if k.Name() == v.Source.Kind {
				warn(o, "spec.source."+k.Name(), h.Lacks(k.Needs(v.Source.Spec)))
			}
		}
	}
	return n
}
