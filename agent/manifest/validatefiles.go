package manifest

import (
	"fmt"
	"os"
	"path/filepath"
)

// Validate is `volumed validate PATH...`: each path is a file or a
// directory (its manifest files, by base name). It parses every file and
// runs the cross-object checks among all of them, and returns every
// problem. Mounts whose volume is not among them are reported with
// Warning set.
func Validate(paths []string, opts Options) []Problem {
	_, probs := ValidateVolumes(paths, opts)
	return probs
}

// ValidateVolumes is Validate that also returns the volumes it accepted,
// for callers that check more of them (validate's host warnings) without
// reading the files again.
func ValidateVolumes(paths []string, opts Options) ([]*Object, []Problem) {
	var probs []Problem
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Reason: "cannot read: " + errText(err)})
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		if opts.CheckOwnership {
			if pr, bad := checkOwner(p, st); bad {
				probs = append(probs, pr)
			}
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Reason: "cannot read: " + errText(err)})
			continue
		}
		for _, ent := range ents { // ReadDir sorts by name
			f := filepath.Join(p, ent.Name())
			if isManifestName(ent.Name()) && !isMask(f) {
				files = append(files, f)
			}
		}
	}
	var cands []candidate
	for _, f := range files {
		objs, ps := ParseFile(f, opts)
		probs = append(probs, ps...)
		for _, o := range objs {
			cands = append(cands, candidate{obj: o, id: ownerID{f, o.Kind, o.Metadata.Name}})
		}
	}
	accepted, cp := resolve(cands, nil)
	accepted, np := refuseUndeclaredNesting(accepted, nil)
	vols, _, out := split(accepted, append(append(probs, cp...), np...))
	return vols, out
}

// split sorts the accepted objects into volumes and mounts, adds a
// waiting problem for each Mount whose volume is not accepted, and drops
// repeated problems (a bad directory is reported for each of its files).
func split(accepted []acceptedObj, probs []Problem) (vols, mounts []*Object, out []Problem) {
	declared := map[string]bool{}
	for _, a := range accepted {
		if a.obj.Kind == KindVolume {
			vols = append(vols, a.obj)
			declared[a.obj.Metadata.Name] = true
		}
	}
	for _, a := range accepted {
		if a.obj.Kind != KindMount {
			continue
		}
		mounts = append(mounts, a.obj)
		if v := a.obj.Mount.Volume; !declared[v] {
			p := a.obj.problem("spec.volume", fmt.Sprintf("waiting: volume %q is not declared", v))
			p.Warning = true
			probs = append(probs, p)
		}
	}
	seen := map[Problem]bool{}
	for _, p := range probs {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return vols, mounts, out
}
