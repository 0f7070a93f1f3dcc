package manifest

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/secret"
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

	var members []string
	src := &s.Source
	for _, m := range []struct {
		name string
		set  bool
	}{
		{"loop", src.Loop != nil}, {"iscsi", src.ISCSI != nil}, {"nvme", src.NVMe != nil},
		{"device", src.Device != nil}, {"directory", src.Directory != nil}, {"tmpfs", src.Tmpfs != nil},
	} {
		if m.set {
			members = append(members, m.name)
		}
	}
	const oneOf = "exactly one of loop, iscsi, nvme, device, directory, tmpfs"
	switch len(members) {
	case 0:
		v.report("spec.source", oneOf+" is required, got none")
	case 1:
	default:
		v.report("spec.source", fmt.Sprintf("%s is allowed, got %s", oneOf, strings.Join(members, " and ")))
	}

	if l := src.Loop; l != nil {
		v.loop(l)
	}
	if s := src.ISCSI; s != nil {
		v.iscsi(s)
	}
	if n := src.NVMe; n != nil {
		v.nvme(n)
	}
	if d := src.Device; d != nil {
		v.device(d)
	}
	if d := src.Directory; d != nil {
		v.directory(d)
	}
	if t := src.Tmpfs; t != nil {
		t.SizeBytes = v.size("spec.source.tmpfs.size", t.Size)
	}

	if fs := s.Filesystem; fs != nil {
		switch {
		case src.Directory != nil:
			v.report("spec.filesystem", "not allowed with a directory source")
		case src.Tmpfs != nil:
			v.report("spec.filesystem", "not allowed with a tmpfs source")
		}
		switch fs.Type {
		case "ext4", "xfs", "btrfs":
		case "":
			v.report("spec.filesystem.type", "required (ext4, xfs or btrfs)")
		default:
			v.report("spec.filesystem.type", fmt.Sprintf("must be ext4, xfs or btrfs, got %q", fs.Type))
		}
		switch fs.Format {
		case "":
			fs.Format = FormatIfBlank
		case FormatIfBlank, FormatNever:
		default:
			v.report("spec.filesystem.format", fmt.Sprintf("must be %s or %s, got %q", FormatIfBlank, FormatNever, fs.Format))
		}
	}

	seen := map[string]int{}
	for i, m := range s.Mounts {
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

func (v *validator) loop(l *LoopSource) {
	const f = "spec.source.loop.file"
	if r := checkPath(l.File); r != "" {
		v.report(f, r)
	} else {
		for _, top := range []string{"/proc", "/sys", "/dev"} {
			if within(l.File, top) {
				v.report(f, fmt.Sprintf("must not be %s or under it", top))
			}
		}
	}
	if l.Create != nil {
		l.Create.SizeBytes = v.size("spec.source.loop.create.size", l.Create.Size)
	}
}

func (v *validator) iscsi(s *ISCSISource) {
	if r := checkHostPort(s.Portal); r != "" {
		v.report("spec.source.iscsi.portal", r)
	}
	switch {
	case s.IQN == "":
		v.report("spec.source.iscsi.iqn", "required")
	case !strings.HasPrefix(s.IQN, "iqn.") && !strings.HasPrefix(s.IQN, "eui.") && !strings.HasPrefix(s.IQN, "naa."):
		v.report("spec.source.iscsi.iqn", fmt.Sprintf(`must start with "iqn.", "eui." or "naa.", got %q`, s.IQN))
	}
	if s.LUN < 0 {
		v.report("spec.source.iscsi.lun", fmt.Sprintf("must be 0 or more, got %d", s.LUN))
	}
	if c := s.CHAP; c != nil {
		if c.Username == "" {
			v.report("spec.source.iscsi.chap.username", "required")
		}
		v.secretFile("spec.source.iscsi.chap.passwordFile", c.PasswordFile, true)
		switch {
		case c.MutualUsername != "" && c.MutualPasswordFile == "":
			v.report("spec.source.iscsi.chap.mutualPasswordFile", "required with mutualUsername")
		case c.MutualUsername == "" && c.MutualPasswordFile != "":
			v.report("spec.source.iscsi.chap.mutualUsername", "required with mutualPasswordFile")
		case c.MutualPasswordFile != "":
			v.secretFile("spec.source.iscsi.chap.mutualPasswordFile", c.MutualPasswordFile, true)
		}
	}
	s.ReplacementTimeoutD = v.duration("spec.source.iscsi.replacementTimeout", s.ReplacementTimeout)
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

func (v *validator) nvme(n *NVMeSource) {
	switch n.Transport {
	case "tcp", "rdma":
	case "":
		v.report("spec.source.nvme.transport", "required (tcp or rdma)")
	default:
		v.report("spec.source.nvme.transport", fmt.Sprintf("must be tcp or rdma, got %q", n.Transport))
	}
	if n.Address == "" {
		v.report("spec.source.nvme.address", "required")
	}
	switch {
	case n.Port == 0:
		n.Port = 4420
	case n.Port < 0 || n.Port > 65535:
		v.report("spec.source.nvme.port", fmt.Sprintf("must be 1 to 65535, got %d", n.Port))
	}
	switch {
	case n.NQN == "":
		v.report("spec.source.nvme.nqn", "required")
	case !strings.HasPrefix(n.NQN, "nqn."):
		v.report("spec.source.nvme.nqn", fmt.Sprintf(`must start with "nqn.", got %q`, n.NQN))
	}
	if n.Namespace < 1 {
		v.report("spec.source.nvme.namespace", fmt.Sprintf("must be 1 or more, got %d", n.Namespace))
	}
	n.CtrlLossTimeoutD = v.duration("spec.source.nvme.ctrlLossTimeout", n.CtrlLossTimeout)
	n.ReconnectDelayD = v.duration("spec.source.nvme.reconnectDelay", n.ReconnectDelay)
	n.KeepAliveTimeoutD = v.duration("spec.source.nvme.keepAliveTimeout", n.KeepAliveTimeout)
	if n.NrIOQueues < 0 {
		v.report("spec.source.nvme.nrIOQueues", fmt.Sprintf("must be 0 (the kernel's default) or more, got %d", n.NrIOQueues))
	}
	v.secretFile("spec.source.nvme.dhchapSecretFile", n.DHCHAPSecretFile, false)
}

func (v *validator) device(d *DeviceSource) {
	var set []string
	for _, m := range []struct{ name, val string }{{"path", d.Path}, {"serial", d.Serial}, {"wwn", d.WWN}} {
		if m.val != "" {
			set = append(set, m.name)
		}
	}
	if len(set) != 1 {
		got := "none"
		if len(set) > 1 {
			got = strings.Join(set, " and ")
		}
		v.report("spec.source.device", "exactly one of path, serial, wwn is required, got "+got)
	}
	if d.Path != "" {
		if r := checkPath(d.Path); r != "" {
			v.report("spec.source.device.path", r)
		} else if !strings.HasPrefix(d.Path, "/dev/") {
			v.report("spec.source.device.path", "must be under /dev")
		}
	}
}

func (v *validator) directory(d *DirectorySource) {
	if r := checkPath(d.Path); r != "" {
		v.report("spec.source.directory.path", r)
	}
	if c := d.Create; c != nil {
		if c.Mode != "" {
			if _, err := ParseMode(c.Mode); err != nil {
				v.report("spec.source.directory.create.mode", err.Error())
			}
		}
		if c.UID < 0 {
			v.report("spec.source.directory.create.uid", fmt.Sprintf("must be 0 or more, got %d", c.UID))
		}
		if c.GID < 0 {
			v.report("spec.source.directory.create.gid", fmt.Sprintf("must be 0 or more, got %d", c.GID))
		}
	}
}

func (v *validator) size(field, s string) int64 {
	if s == "" {
		v.report(field, "required")
		return 0
	}
	n, err := ParseSize(s)
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
		if within(p, f) {
			return fmt.Sprintf("must not be %s or under it", f)
		}
		if within(f, p) {
			return fmt.Sprintf("must not contain %s (it would hide it)", f)
		}
	}
	if stateDir != "" {
		sd := filepath.Clean(stateDir)
		if within(p, sd) {
			return fmt.Sprintf("must not be the state dir %s or under it", sd)
		}
		if within(sd, p) {
			return fmt.Sprintf("must not contain the state dir %s (it would hide it)", sd)
		}
	}
	return ""
}

// within reports whether p is dir or under it; both are clean and absolute.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
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

var sizeUnits = map[string]int64{
	"":   1,
	"k":  1e3,
	"K":  1e3,
	"M":  1e6,
	"G":  1e9,
	"T":  1e12,
	"P":  1e15,
	"Ki": 1 << 10,
	"Mi": 1 << 20,
	"Gi": 1 << 30,
	"Ti": 1 << 40,
	"Pi": 1 << 50,
}

// ParseSize parses a size as written in a manifest: a whole number of bytes
// with an optional decimal (k, K, M, G, T, P) or binary (Ki, Mi, Gi, Ti, Pi)
// suffix, e.g. "64Mi", "10Gi", "1G", "1048576".
func ParseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit, ok := sizeUnits[s[i:]]
	if i == 0 || !ok {
		return 0, fmt.Errorf("invalid size %q: want a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T or P", s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * unit, nil
}

// ParseMode parses a directory mode written as octal digits, e.g. "0750".
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) < 3 || len(s) > 4 || m > 0o7777 {
		return 0, fmt.Errorf("must be an octal mode like \"0750\", got %q", s)
	}
	return uint32(m), nil
}
