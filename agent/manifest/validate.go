package manifest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/internal/size"
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Paths that belong to the kernel or to volumed itself: nothing is
// published on or under them.
var forbiddenTargets = []string{"/proc", "/sys", "/dev", "/run/volumed"}

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

func checkName(name string) string {
	switch {
	case name == "":
		return "required"
	case len(name) > 63:
		return fmt.Sprintf("must be at most 63 characters, got %d", len(name))
	case !nameRE.MatchString(name):
		return fmt.Sprintf("must be lowercase letters, digits and '-', starting and ending with a letter or digit, got %q", name)
	}
	return ""
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

// LUKS2 sector sizes cryptsetup accepts.
var luksSectorSizes = []int{512, 1024, 2048, 4096}

// cipherRE is cryptsetup's cipher-chainmode-ivmode spelling, e.g.
// aes-xts-plain64 or capi:xts(aes)-plain64; checked only for its shape
// (the kernel's crypto API has the last word, at luksFormat).
var cipherRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_:()]*(-[a-z0-9_:()]+)*$`)

// MaxPCR is the highest PCR index of a TPM2 (PC client: 24 PCRs).
const MaxPCR = 23

// encryption checks spec.encryption: only on a writable block source,
// LUKS2 with at least one key, each a file or a TPM2 seal.
func (v *validator) encryption(e *Encryption, src *Source, staged bool) {
	switch {
	case staged:
		v.report("spec.encryption", fmt.Sprintf("not allowed with %s %s source: only a block device is encrypted", article(src.Kind), src.Kind))
		return
	case src.Caps.ReadOnly:
		v.report("spec.encryption", fmt.Sprintf("not allowed on a read-only source (spec.source.%s): a LUKS2 header cannot be written or its keys enrolled", src.Kind))
		return
	case e.LUKS2 == nil:
		v.report("spec.encryption.luks2", "required (the only encryption there is)")
		return
	}
	l := e.LUKS2
	if len(l.Keys) == 0 {
		v.report("spec.encryption.luks2.keys", "at least one key is required ({file: PATH} or {tpm2: {pcrs: [...]}})")
	}
	files := map[string]int{}
	tpm2 := -1
	for i, k := range l.Keys {
		field := fmt.Sprintf("spec.encryption.luks2.keys[%d]", i)
		switch {
		case k.File != "" && k.TPM2 != nil:
			v.report(field, "exactly one of file, tpm2 is required, got file and tpm2")
		case k.File == "" && k.TPM2 == nil:
			v.report(field, "exactly one of file, tpm2 is required, got none")
		case k.File != "":
			if j, dup := files[k.File]; dup {
				v.report(field+".file", fmt.Sprintf("duplicate of spec.encryption.luks2.keys[%d].file", j))
				continue
			}
			files[k.File] = i
			v.secretFile(field+".file", k.File, true)
		default:
			if tpm2 >= 0 {
				v.report(field+".tpm2", fmt.Sprintf("duplicate of spec.encryption.luks2.keys[%d].tpm2: one TPM2 key per volume", tpm2))
				continue
			}
			tpm2 = i
			v.pcrs(field+".tpm2.pcrs", k.TPM2.PCRs)
		}
	}
	if l.Cipher != "" && !cipherRE.MatchString(l.Cipher) {
		v.report("spec.encryption.luks2.cipher", fmt.Sprintf("must be a cryptsetup cipher such as aes-xts-plain64, got %q", l.Cipher))
	}
	switch l.PBKDF {
	case "":
		l.PBKDF = PBKDFArgon2id
	case PBKDFArgon2id, PBKDFPBKDF2:
	default:
		v.report("spec.encryption.luks2.pbkdf", fmt.Sprintf("must be %s or %s, got %q", PBKDFArgon2id, PBKDFPBKDF2, l.PBKDF))
	}
	if l.SectorSize != 0 && !slices.Contains(luksSectorSizes, l.SectorSize) {
		v.report("spec.encryption.luks2.sectorSize", fmt.Sprintf("must be 512, 1024, 2048 or 4096, got %d", l.SectorSize))
	}
}

func (v *validator) pcrs(field string, pcrs []int) {
	if len(pcrs) == 0 {
		v.report(field, "at least one PCR is required (e.g. [7]: the Secure Boot state)")
		return
	}
	seen := map[int]int{}
	for i, p := range pcrs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p < 0 || p > MaxPCR {
			v.report(f, fmt.Sprintf("must be a PCR index from 0 to %d, got %d", MaxPCR, p))
			continue
		}
		if j, dup := seen[p]; dup {
			v.report(f, fmt.Sprintf("duplicate of %s[%d]", field, j))
			continue
		}
		seen[p] = i
	}
}

// secretFile checks a file named as holding a secret. A file that does not
// exist yet is accepted (provisioning may write it after the manifest;
// the attach waits and says so); one that anybody but root could read is
// refused, so the manifest never works with a leaked secret.
func (v *validator) secretFile(field, p string, required bool) {
	if p == "" && !required {
		return
	}
	if r := checkPath(p); r != "" {
		v.report(field, r)
		return
	}
	if !v.opts.CheckOwnership {
		return
	}
	if _, err := os.Lstat(p); err != nil {
		return
	}
	if err := secret.Check(p); err != nil {
		v.report(field, strings.TrimPrefix(err.Error(), "secret file "+p+": "))
	}
}

func (v *validator) duration(field, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		v.report(field, fmt.Sprintf("must be a duration such as 30s or 10m, got %q", s))
		return 0
	}
	return d
}

// article is "an" before a kind's name that starts with a vowel.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

func (v *validator) size(field, s string) int64 {
	if s == "" {
		v.report(field, "required")
		return 0
	}
	n, err := size.Parse(s)
	if err != nil {
		v.report(field, err.Error())
		return 0
	}
	if n <= 0 {
		v.report(field, fmt.Sprintf("must be more than 0, got %q", s))
		return 0
	}
	return n
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

// checkSubPath refuses what can only be an escape or a mistake; the agent
// still resolves the path beneath the volume without following symlinks,
// which is what stops a symlink inside the volume from leading out.
func checkSubPath(p string) string {
	switch {
	case filepath.IsAbs(p):
		return fmt.Sprintf("must be relative to the volume's root, got %q", p)
	case filepath.Clean(p) != p || p == ".":
		return fmt.Sprintf("must be a clean relative path (did you mean %q?)", filepath.Clean(p))
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Sprintf("must not contain \"..\", got %q", p)
		}
	}
	return ""
}

// checkPath requires an absolute, clean path: what is written is what is
// compared when looking for conflicts.
func checkPath(p string) string {
	switch {
	case p == "":
		return "required"
	case !filepath.IsAbs(p):
		return fmt.Sprintf("must be an absolute path, got %q", p)
	case filepath.Clean(p) != p:
		return fmt.Sprintf("must be a clean path (did you mean %q?)", filepath.Clean(p))
	}
	return ""
}

// checkTarget applies the rules for a place a volume is published.
func checkTarget(p, stateDir string) string {
	if r := checkPath(p); r != "" {
		return r
	}
	if p == "/" {
		return "must not be /"
	}
	for _, f := range forbiddenTargets {
		if safepath.Within(p, f) {
			return fmt.Sprintf("must not be %s or under it", f)
		}
		if safepath.Within(f, p) {
			return fmt.Sprintf("must not contain %s (it would hide it)", f)
		}
	}
	if stateDir != "" {
		sd := filepath.Clean(stateDir)
		if safepath.Within(p, sd) {
			return fmt.Sprintf("must not be the state dir %s or under it", sd)
		}
		if safepath.Within(sd, p) {
			return fmt.Sprintf("must not contain the state dir %s (it would hide it)", sd)
		}
	}
	return ""
}

func checkHostPort(s string) string {
	if s == "" {
		return "required (host:port)"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return fmt.Sprintf("must be host:port, got %q", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port must be 1 to 65535, got %q", port)
	}
	return ""
}

// ParseMode parses a directory mode written as octal digits, e.g. "0750".
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) < 3 || len(s) > 4 || m > 0o7777 {
		return 0, fmt.Errorf("must be an octal mode like \"0750\", got %q", s)
	}
	return uint32(m), nil
}

// CheckTarget says why p may not be a publish target ("" if it may): the
// rules a manifest's mounts[].path is held to, for targets that come
// from elsewhere (the kubelet's).
func CheckTarget(p, stateDir string) string { return checkTarget(p, stateDir) }

// ReservedPrefix starts the names of the volumes the CSI node service
// makes; a manifest may not declare one, so neither source can take
// over the other's volume.
const ReservedPrefix = "csi-"

// CheckName says why name may not be a volume's name ("" if it may).
func CheckName(name string) string { return checkName(name) }
