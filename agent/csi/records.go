package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/volumed/volumed/internal/durable"
)

// Record is what the kubelet asked of one volume, kept durably: the
// kubelet does not send NodeStageVolume again for a volume it staged, so
// an agent restart must find its desired state here. It holds no secret
// (secrets are files of their own, see writeSecrets).
type Record struct {
	VolumeID string `json:"volumeID"`
	// Context is the volume context as the kubelet sent it at stage.
	Context     map[string]string `json:"context"`
	StagingPath string            `json:"stagingPath"`
	Block       bool              `json:"block,omitempty"`
	FSType      string            `json:"fsType,omitempty"`
	MountFlags  []string          `json:"mountFlags,omitempty"`
	AccessMode  int32             `json:"accessMode"`
	// CapacityBytes is the largest size NodeExpandVolume asked for.
	CapacityBytes int64 `json:"capacityBytes,omitempty"`
	// Secrets names the secret keys written beside the record.
	Secrets []string `json:"secrets,omitempty"`
	Targets []Target `json:"targets,omitempty"`
}

// Target is one NodePublishVolume.
type Target struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Made: nothing was at the path when it was published, so what is
	// there is volumed's to remove at unpublish (a record written before
	// this was kept says false: the target is left).
	Made bool `json:"made,omitempty"`
}

func (r *Record) target(p string) (Target, bool) {
	for _, t := range r.Targets {
		if t.Path == p {
			return t, true
		}
	}
	return Target{}, false
}

func (r *Record) clone() *Record {
	c := *r
	c.Targets = append([]Target(nil), r.Targets...)
	c.MountFlags = append([]string(nil), r.MountFlags...)
	c.Secrets = append([]string(nil), r.Secrets...)
	return &c
}

// records is the directory of records, one file per volume, each
// replaced atomically: written to a temporary file, synced, renamed over
// the old one, and the directory synced. A crash leaves the old record
// or the new one, never a mix; a left-over temporary file is ignored.
type records struct{ dir string }

const recordExt = ".json"

func (rs records) path(name string) string { return filepath.Join(rs.dir, name+recordExt) }

func (rs records) put(name string, r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(rs.dir, 0o700); err != nil {
		return fmt.Errorf("csi records: %w", err)
	}
	return durable.WriteFile(rs.path(name), append(b, '\n'), 0o600)
}

func (rs records) remove(name string) error {
	err := os.Remove(rs.path(name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("csi record %s: %w", name, err)
	}
	if err := os.RemoveAll(rs.secretDir(name)); err != nil {
		return fmt.Errorf("csi secrets of %s: %w", name, err)
	}
	if err := durable.SyncDir(rs.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// load reads every record; the names are the file names.
func (rs records) load() (map[string]*Record, error) { return loadJSON[Record](rs.dir, "csi records") }

// loadJSON reads every <name>.json file of dir (a missing dir holds
// none); what names the files in errors. One that cannot be decoded is
// named in the error, the others are still returned.
func loadJSON[T any](dir, what string) (map[string]*T, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*T{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := map[string]*T{}
	var bad []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), recordExt)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", what, e.Name(), err)
		}
		r := new(T)
		if err := json.Unmarshal(b, r); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", filepath.Join(dir, e.Name()), err))
			continue
		}
		out[name] = r
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return out, fmt.Errorf("%s unreadable: %s", what, strings.Join(bad, "; "))
	}
	return out, nil
}

func (rs records) secretDir(name string) string { return filepath.Join(rs.dir, "secrets", name) }

// writeSecrets writes each secret to a file of its own, mode 0600, for
// the kind's *File field (iscsi.chap.password → iscsi.chap.passwordFile),
// and returns the context keys to add. The values are never logged.
// Every key is checked before any file is written, and a failure removes
// what was written: a refused stage leaves no secret behind.
func (rs records) writeSecrets(name string, secrets map[string]string) (map[string]string, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		if r := checkSecretKey(k); r != "" {
			return nil, fmt.Errorf("secret key %q: %s", k, r)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dir := rs.secretDir(name)
	out := map[string]string{}
	err := func() error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("csi secrets: %w", err)
		}
		for _, k := range keys {
			p := filepath.Join(dir, k)
			if err := durable.WriteFile(p, []byte(secrets[k]), 0o600); err != nil {
				return err
			}
			out[k+"File"] = p
		}
		return nil
	}()
	if err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			return nil, fmt.Errorf("%w; and removing the secrets written: %v", err, rerr)
		}
		return nil, err
	}
	return out, nil
}

// checkSecretKey says why k cannot name a secret file ("" when it can):
// it must be one field name, never a path.
func checkSecretKey(k string) string {
	if k == "" || strings.ContainsAny(k, "/\x00") || strings.HasPrefix(k, ".") {
		return "not a field name"
	}
	return ""
}
