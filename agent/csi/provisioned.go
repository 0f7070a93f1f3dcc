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
	Image string `json:"image,omitempty"`
	// Class and LV are the lvm backend's: the class's VG, type and pool,
	// and the LV's name; the LV is made at first stage (by the lvm kind),
	// or at create when it is restored from a snapshot.
	Class *decide.LVMClass `json:"lvm,omitempty"`
	LV    string           `json:"lv,omitempty"`
	// SizeBytes is the size promised: created with, or expanded to.
	SizeBytes int64 `json:"sizeBytes"`
	// Context is the volume context answered (the PV's).
	Context map[string]string `json:"context"`
}

func (p *Provisioned) clone() *Provisioned {
	c := *p
	c.Context = maps.Clone(p.Context)
	c.Request.Params = maps.Clone(p.Request.Params)
	if p.Class != nil {
		cl := *p.Class
		c.Class = &cl
	}
	return &c
}

// provisionedDir and snapshotDir are below the node records' dir; the
// node records' loader reads only regular files, so they never mix.
const (
	provisionedDir = "provisioned"
	snapshotDir    = "snapshots"
)

// keyedRecords is a directory of records of one type, one file per key,
// each replaced atomically as the node records are (durable.WriteFile).
type keyedRecords[T any] struct {
	dir  string
	what string
}

func (ks keyedRecords[T]) path(key string) string { return filepath.Join(ks.dir, key+recordExt) }

func (ks keyedRecords[T]) put(key string, r *T) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ks.dir, 0o700); err != nil {
		return fmt.Errorf("%s: %w", ks.what, err)
	}
	return durable.WriteFile(ks.path(key), append(b, '\n'), 0o600)
}

func (ks keyedRecords[T]) remove(key string) error {
	if err := os.Remove(ks.path(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %s: %w", ks.what, key, err)
	}
	if err := durable.SyncDir(ks.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (ks keyedRecords[T]) load() (map[string]*T, error) { return loadJSON[T](ks.dir, ks.what) }

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

// served says whether backend names a backend this node provisions
// with: its IDs are this node's to answer.
func served(backend string) bool { return backend == BackendLoop || backend == BackendLVM }

// parseProvisionedID splits a volume ID made by provisionedID; ok is
// false for any other ID (a static PV's).
func parseProvisionedID(id string) (backend, node, key string, ok bool) {
	first, last := strings.Index(id, "/"), strings.LastIndex(id, "/")
	if first <= 0 || last <= first+1 || last == len(id)-1 {
		return "", "", "", false
	}
	return id[:first], id[first+1 : last], id[last+1:], true
}
