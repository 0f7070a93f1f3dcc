package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/filesystem"
)

// defaultFSType is the filesystem of a mount volume whose capability
// names none.
const defaultFSType = filesystem.Default

// VolumeName is the volumed name of a CSI volume: "csi-" and the volume
// ID when that is a valid name, else "csi-" and a hash of the ID (CSI
// IDs may hold any character and be 128 bytes long).
func VolumeName(volumeID string) string {
	if n := manifest.ReservedPrefix + volumeID; manifest.CheckName(n) == "" {
		return n
	}
	sum := sha256.Sum256([]byte(volumeID))
	return manifest.ReservedPrefix + hex.EncodeToString(sum[:10])
}

// desired translates a record into the desired-state entry a manifest
// with the same source would make. The volume context's keys are the
// manifest's fields below spec.source ("loop.file", "iscsi.portal",
// "iscsi.lun") or, for "filesystem.*" and "encryption.*", below spec
// (filesystem.format, encryption.luks2.keys; a stage secret
// "encryption.luks2.key" is the first key);
// a value is read as YAML ("0" is a number, "[a, b]" a list), and the
// kind's strict decoding and checks then apply as to a manifest. Keys
// with a "/" are the kubelet's and provisioner's own
// (csi.storage.k8s.io/pod.name) and are left out.
func desired(name string, r *Record, opts manifest.Options) (*agent.Desired, error) {
	vs, err := parseRecord(r, r.Context, opts)
	if err != nil {
		return nil, err
	}
	if ctx, grown := contextWithCapacity(r, vs.Source); grown {
		if vs, err = parseRecord(r, ctx, opts); err != nil {
			return nil, err
		}
	}
	if r.Block {
		vs.Filesystem = nil
	}
	var targets []agent.DesiredTarget
	for _, t := range r.Targets {
		targets = append(targets, agent.DesiredTarget{Path: t.Path, ReadOnly: t.ReadOnly, Block: r.Block, From: "CSI/" + r.VolumeID})
	}
	d := agent.NewDesired(name, "csi:"+r.VolumeID, vs, r.Block, targets)
	if !r.Block {
		d.StagingPath = path.Clean(r.StagingPath)
	}
	return d, nil
}

// parseRecord is the volume the record's capability and the volume
// context ctx make.
func parseRecord(r *Record, ctx map[string]string, opts manifest.Options) (*manifest.VolumeSpec, error) {
	doc, err := volumeDocument(r, ctx)
	if err != nil {
		return nil, err
	}
	return parseVolume(r.VolumeID, doc, opts)
}

// volumeDocument is the manifest document a record's capability and
// the volume context ctx make.
func volumeDocument(r *Record, ctx map[string]string) (*yaml.Node, error) {
	fs, err := filesystemBlock(r)
	if err != nil {
		return nil, err
	}
	spec, source, enc := mapping(), mapping(), mapping()
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.Contains(k, "/") {
			continue
		}
		v, err := value(ctx[k])
		if err != nil {
			return nil, fmt.Errorf("volume context %s: %w", k, err)
		}
		parts := strings.Split(k, ".")
		switch {
		case k == secretKeyFile:
			// Added to the keys below, after any keys the context lists.
		case parts[0] == "filesystem" && len(parts) > 1:
			set(fs, parts[1:], v)
		case parts[0] == "encryption" && len(parts) > 1:
			set(enc, parts[1:], v)
		default:
			set(source, parts, v)
		}
	}
	if f, ok := ctx[secretKeyFile]; ok {
		addKeyFile(enc, f)
	}
	set(spec, []string{"source"}, source)
	set(spec, []string{"filesystem"}, fs)
	if len(enc.Content) > 0 {
		set(spec, []string{"encryption"}, enc)
	}
	doc := mapping()
	set(doc, []string{"apiVersion"}, scalar(manifest.APIVersion))
	set(doc, []string{"kind"}, scalar(manifest.KindVolume))
	// The document's own name: the csi- prefix is refused to manifests.
	set(doc, []string{"metadata", "name"}, scalar("csi"))
	set(doc, []string{"spec"}, spec)
	return doc, nil
}

// filesystemBlock is the filesystem block the capability makes. It is
// always there for the checks; a block volume drops it after (a raw
// block volume has none).
func filesystemBlock(r *Record) (*yaml.Node, error) {
	fs := mapping()
	// The capability's fs_type, else the context's filesystem.type
	// (set by the caller), else ext4; a context that contradicts the
	// capability is refused.
	if t, ok := r.Context["filesystem.type"]; ok && r.FSType != "" && t != r.FSType {
		return nil, fmt.Errorf("volume %s: the volume context's filesystem.type %s contradicts the capability's fs_type %s", r.VolumeID, t, r.FSType)
	}
	fsType := r.FSType
	if fsType == "" || r.Block {
		fsType = defaultFSType
	}
	set(fs, []string{"type"}, scalar(fsType))
	if !r.Block {
		if len(r.MountFlags) > 0 {
			flags := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, f := range r.MountFlags {
				flags.Content = append(flags.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f})
			}
			set(fs, []string{"mountOptions"}, flags)
		}
		// The kubelet asks NodeExpandVolume only after the device grew.
		set(fs, []string{"grow"}, scalar("true"))
	}
	return fs, nil
}

// parseVolume runs the manifest's decoding and checks on doc, as on a
// manifest's file, and returns its volume.
func parseVolume(volumeID string, doc *yaml.Node, opts manifest.Options) (*manifest.VolumeSpec, error) {
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	objs, probs := manifest.ParseBytes("csi:"+volumeID, data, opts)
	if len(probs) > 0 {
		var msgs []string
		for _, p := range probs {
			// Lines and columns point into a document the user never saw.
			msgs = append(msgs, strings.TrimPrefix(p.Field+": "+p.Reason, ": "))
		}
		return nil, fmt.Errorf("volume %s: %s", volumeID, strings.Join(msgs, "; "))
	}
	return objs[0].Volume, nil
}

// hostPrivileges names what a volume asks that only the host's owner
// may grant: setuid binaries and device nodes that work from the mount
// (filesystem.allowSuid, allowDev, or a suid/dev mount flag).
func hostPrivileges(d *agent.Desired) []string {
	fs := d.Spec.Filesystem
	if fs == nil {
		return nil
	}
	var out []string
	if fs.AllowSuid || slices.Contains(fs.MountOptions, "suid") {
		out = append(out, "setuid (filesystem.allowSuid)")
	}
	if fs.AllowDev || slices.Contains(fs.MountOptions, "dev") {
		out = append(out, "device nodes (filesystem.allowDev)")
	}
	return out
}

// contextWithCapacity is the volume context with the size an expansion
// asked for, and whether that differs from ctx: a source whose kind keeps
// its own size (says which field holds it, Caps.SizeField) is grown to
// it, never shrunk; other sources grow on their target's side.
func contextWithCapacity(r *Record, src manifest.Source) (map[string]string, bool) {
	if src.Caps.SizeField == "" || r.CapacityBytes <= src.Caps.Size {
		return r.Context, false
	}
	out := make(map[string]string, len(r.Context)+1)
	maps.Copy(out, r.Context)
	out[src.Kind+"."+src.Caps.SizeField] = strconv.FormatInt(r.CapacityBytes, 10)
	return out, true
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

// scalar is a plain scalar: YAML resolves its type as in a manifest.
func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// value reads one context value as YAML: a flow list or mapping as such,
// anything else as a plain scalar.
func value(v string) (*yaml.Node, error) {
	t := strings.TrimSpace(v)
	if !strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "{") {
		n := scalar(v)
		if v == "" || strings.ContainsAny(v, ":#\n") || v != t {
			n.Style = yaml.DoubleQuotedStyle
			n.Tag = "!!str"
		}
		return n, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(v), &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("not one YAML value")
	}
	return doc.Content[0], nil
}

// secretKeyFile is the context key of the stage secret
// "encryption.luks2.key" once written to a file (writeSecrets): a LUKS2
// key of the volume, tried first.
const secretKeyFile = "encryption.luks2.keyFile"

// addKeyFile puts {file: f} first in enc's luks2.keys.
func addKeyFile(enc *yaml.Node, f string) {
	key := mapping()
	set(key, []string{"file"}, scalar(f))
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{key}}
	for i := 0; i+1 < len(enc.Content); i += 2 {
		if luks := enc.Content[i+1]; enc.Content[i].Value == "luks2" && luks.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(luks.Content); j += 2 {
				if old := luks.Content[j+1]; luks.Content[j].Value == "keys" && old.Kind == yaml.SequenceNode {
					seq.Content = append(seq.Content, old.Content...)
				}
			}
		}
	}
	set(enc, []string{"luks2", "keys"}, seq)
}

// set puts v at keys below the mapping m, making the mappings between.
func set(m *yaml.Node, keys []string, v *yaml.Node) {
	for i, k := range keys {
		var next *yaml.Node
		for j := 0; j+1 < len(m.Content); j += 2 {
			if m.Content[j].Value == k {
				next = m.Content[j+1]
			}
		}
		if i == len(keys)-1 {
			if next != nil {
				*next = *v
			} else {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, v)
			}
			return
		}
		if next == nil || next.Kind != yaml.MappingNode {
			n := mapping()
			if next != nil {
				*next = *n
				n = next
			} else {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, n)
			}
			next = n
		}
		m = next
	}
}

// CheckVolume reports whether a volume's attributes (a PV's
// volumeAttributes and the keys of its stage secret) and its capability
// translate into a volume, as NodeStageVolume would: for the checks of
// shipped examples and of an administrator's PVs.
func CheckVolume(volumeID string, context map[string]string, secretKeys []string, fsType string, block bool, opts manifest.Options) error {
	r := &Record{VolumeID: volumeID, Context: map[string]string{}, FSType: fsType, Block: block, StagingPath: "/staging"}
	for k, v := range context {
		r.Context[k] = v
	}
	for _, k := range secretKeys {
		r.Context[k+"File"] = path.Join("/secrets", k)
	}
	_, err := desired(VolumeName(volumeID), r, opts)
	return err
}
