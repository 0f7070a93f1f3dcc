package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/durable"
)

// Provisioned is what CreateVolume promised, kept durably before the
// call is answered: the external-provisioner writes the PV only after
// the answer, and retries a call that got none with the same name, which
// must then find this record and answer with the same volume.
type Provisioned struct {
	// Request is the CreateVolume call's name, capacity range,
	// parameters and access type: what a repeated call is compared with.
	Request  decide.VolumeRequest `json:"request"`
	VolumeID string               `json:"volumeID"`
	Backend  string               `json:"backend"`
	// Image is the loop backend's image file; it is made at first stage.
	Image string `json:"image"`
	// SizeBytes is the size promised: created with, or expanded to.
	SizeBytes int64 `json:"sizeBytes"`
	// Context is the volume context answered (the PV's).
	Context map[string]string `json:"context"`
}

func (p *Provisioned) clone() *Provisioned {
	c := *p
	c.Context = maps.Clone(p.Context)
	c.Request.Params = maps.Clone(p.Request.Params)
	return &c
}

// provisionedDir is below the node records' dir; the node records'
// loader reads only regular files, so the two never mix.
const provisionedDir = "provisioned"

// provisionedRecords is the directory of provisioned volumes, one file
// per volume named by its key, replaced atomically as the node records
// are (durable.WriteFile).
type provisionedRecords struct{ dir string }

func (ps provisionedRecords) path(key string) string { return filepath.Join(ps.dir, key+recordExt) }

func (ps provisionedRecords) put(key string, p *Provisioned) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ps.dir, 0o700); err != nil {
		return fmt.Errorf("csi provisioned records: %w", err)
	}
	return durable.WriteFile(ps.path(key), append(b, '\n'), 0o600)
}

func (ps provisionedRecords) remove(key string) error {
	if err := os.Remove(ps.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("csi provisioned record %s: %w", key, err)
	}
	if err := durable.SyncDir(ps.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (ps provisionedRecords) load() (map[string]*Provisioned, error) {
	return loadJSON[Provisioned](ps.dir, "csi provisioned records")
}

// volumeKey is the file-safe key of a CreateVolume name: the name when
// it is a valid volume name, else "v-" and a hash of it (CSI names may
// hold any character). The record keeps the name itself, so two names
// with one key are told apart (decide.SameVolume).
func volumeKey(name string) string {
	if manifest.CheckName(name) == "" {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "v-" + hex.EncodeToString(sum[:12])
}

// Volume IDs of provisioned volumes: "<backend>/<node>/<key>". They name
// the node (a PV is bound to it) and the backend (DeleteVolume needs no
// record to know where to look). Neither backend nor key holds a "/",
// so the node is whatever lies between.
func provisionedID(backend, node, key string) string {
	return backend + "/" + node + "/" + key
}

// parseProvisionedID splits a volume ID made by provisionedID; ok is
// false for any other ID (a static PV's).
func parseProvisionedID(id string) (backend, node, key string, ok bool) {
	first, last := strings.Index(id, "/"), strings.LastIndex(id, "/")
	if first <= 0 || last <= first+1 || last == len(id)-1 {
		return "", "", "", false
	}
	return id[:first], id[first+1 : last], id[last+1:], true
}
