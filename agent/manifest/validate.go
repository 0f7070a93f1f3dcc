package manifest

import (
	"fmt"
	"strings"

	"github.com/volumed/volumed/internal/filesystem"
)

// validator checks one decoded object on its own and fills its defaults.
type validator struct {
	obj   *Object
	opts  Options
	bad   map[string]bool // fields that failed to decode: already reported
	probs []Problem
}

func (v *validator) report(field, reason string) {
	for f := field; ; f = parentPath(f) {
		if v.bad[f] {
			return
		}
		if f == "" {
			break
		}
	}
	v.probs = append(v.probs, v.obj.problem(field, reason))
}

func (v *validator) object(kindOK, hasSpec bool) {
	o := v.obj
	switch o.APIVersion {
	case APIVersion:
	case "":
		v.report("apiVersion", "required")
	default:
		v.report("apiVersion", fmt.Sprintf("must be %q, got %q", APIVersion, o.APIVersion))
	}
	switch {
	case o.Kind == "":
		v.report("kind", "required")
	case !kindOK:
		v.report("kind", fmt.Sprintf("must be Volume or Mount, got %q", o.Kind))
	}
	if r := checkName(o.Metadata.Name); r != "" {
		v.report("metadata.name", r)
	} else if o.Kind == KindVolume && strings.HasPrefix(o.Metadata.Name, ReservedPrefix) {
		v.report("metadata.name", fmt.Sprintf("names starting with %q are the volumes of the CSI node service (volumed run --csi-endpoint)", ReservedPrefix))
	}
	if !kindOK {
		return
	}
	if !hasSpec {
		v.report("spec", "required")
	}
	if o.Volume != nil {
		v.volume(o.Volume)
	}
	if o.Mount != nil {
		v.mount(o.Mount)
	}
}

func (v *validator) volume(s *VolumeSpec) {
	switch s.State {
	case "":
		s.State = "present"
	case "present", "absent":
	default:
		v.report("spec.state", fmt.Sprintf("must be present or absent, got %q", s.State))
	}
	src := &s.Source
	staged := v.source(src)
	v.blockOrFilesystem(s, staged)
	if fs := s.Filesystem; fs != nil {
		v.filesystem(fs)
	}
	if e := s.Encryption; e != nil && len(src.more) > 0 {
		v.encryption(e, src, staged)
	}
	v.mountPaths(s.Mounts)
}

// source checks that exactly one source kind is set, lets that kind
// check its own fields, and tells whether the kind is staged (a
// directory or tmpfs, with no filesystem block).
func (v *validator) source(src *Source) (staged bool) {
	oneOf := oneOf(v.opts.Kinds)
	switch len(src.more) {
	case 0:
		v.report("spec.source", oneOf+" is required, got none")
	case 1:
	default:
		var members []string
		for _, m := range src.more {
			members = append(members, m.kind.Name())
		}
		v.report("spec.source", fmt.Sprintf("%s is allowed, got %s", oneOf, strings.Join(members, " and ")))
	}
	for i, m := range src.more {
		caps := m.kind.Check(m.spec, &Check{v: v, prefix: "spec.source." + m.kind.Name()})
		if i == 0 {
			src.Caps, staged = caps, m.kind.Staged()
			src.Staged = staged
		}
	}
	return staged
}

// blockOrFilesystem checks that a block source has a filesystem block
// or is published raw, and that a staged source has neither.
func (v *validator) blockOrFilesystem(s *VolumeSpec, staged bool) {
	src := &s.Source
	switch fs := s.Filesystem; {
	case len(src.more) == 0:
	case fs != nil && staged:
		v.report("spec.filesystem", fmt.Sprintf("not allowed with %s %s source", article(src.Kind), src.Kind))
	case fs == nil && !staged && len(s.Mounts) == 0:
		// A block source with no filesystem and nowhere to publish it is
		// almost always a forgotten filesystem block.
		v.report("spec.filesystem", fmt.Sprintf("required with source.%s, a block device: add one with type %s, or publish the raw device with mounts: [{path: ..., block: true}]", src.Kind, filesystem.List()))
	}
	rawBlock := len(src.more) > 0 && s.Filesystem == nil && !staged
	for i, m := range s.Mounts {
		switch {
		case m.Block && !rawBlock:
			v.report(fmt.Sprintf("spec.mounts[%d].block", i), "only a block source without a filesystem block is published raw: remove block: true or the filesystem block")
		case !m.Block && rawBlock:
			v.report(fmt.Sprintf("spec.mounts[%d].block", i), fmt.Sprintf("required: source.%s has no filesystem block, so it is published as the raw device (block: true), or add a filesystem block", src.Kind))
		}
	}
}

func (v *validator) filesystem(fs *Filesystem) {
	switch _, known := filesystem.Lookup(fs.Type); {
	case known:
	case fs.Type == "":
		v.report("spec.filesystem.type", "required ("+filesystem.List()+")")
	default:
		v.report("spec.filesystem.type", fmt.Sprintf("must be %s, got %q", filesystem.List(), fs.Type))
	}
	switch fs.Format {
	case "":
		fs.Format = FormatIfBlank
	case FormatIfBlank, FormatNever:
	default:
		v.report("spec.filesystem.format", fmt.Sprintf("must be %s or %s, got %q", FormatIfBlank, FormatNever, fs.Format))
	}
}

func (v *validator) mountPaths(mounts []Target) {
	seen := map[string]int{}
	for i, m := range mounts {
		field := fmt.Sprintf("spec.mounts[%d].path", i)
		if r := checkTarget(m.Path, v.opts.StateDir); r != "" {
			v.report(field, r)
			continue
		}
		if j, dup := seen[m.Path]; dup {
			v.report(field, fmt.Sprintf("duplicate of spec.mounts[%d].path", j))
			continue
		}
		seen[m.Path] = i
		if m.NestedIn != "" {
			if r := checkName(m.NestedIn); r != "" {
				v.report(fmt.Sprintf("spec.mounts[%d].nestedIn", i), r)
			}
		}
	}
}

func (v *validator) mount(m *MountSpec) {
	if r := checkName(m.Volume); r != "" {
		v.report("spec.volume", r)
	}
	if r := checkTarget(m.Path, v.opts.StateDir); r != "" {
		v.report("spec.path", r)
	}
	if m.SubPath != "" {
		if r := checkSubPath(m.SubPath); r != "" {
			v.report("spec.subPath", r)
		}
	}
	if m.NestedIn != "" {
		if r := checkName(m.NestedIn); r != "" {
			v.report("spec.nestedIn", r)
		}
	}
}

// article is "an" before a kind's name that starts with a vowel.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
