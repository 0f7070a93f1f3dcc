package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// bucketFormer keeps, per volume name, the last attachment a record
// held. It outlives the record: after a manifest is gone and its volume
// torn down, `volumed wipe --volume NAME` still finds the device. It is
// made when first written, so older files need no schema change.
var bucketFormer = []byte("former")

// Former is the last attachment recorded for a volume name.
type Former struct {
	Attachment Attachment `json:"attachment"`
	At         time.Time  `json:"at"`
}

// noteFormer keeps the attachment of a record being written.
func noteFormer(tx *bbolt.Tx, name string, data []byte) error {
	var rec struct {
		Attachment *Attachment `json:"attachment"`
		UpdatedAt  time.Time   `json:"updatedAt"`
	}
	if json.Unmarshal(data, &rec) != nil || rec.Attachment == nil {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketFormer)
	if err != nil {
		return err
	}
	out, err := json.Marshal(Former{Attachment: *rec.Attachment, At: rec.UpdatedAt})
	if err != nil {
		return err
	}
	return b.Put([]byte(name), out)
}

// Snapshot is what a state file holds, read by another process.
type Snapshot struct {
	Volumes map[string]*Volume
	Former  map[string]Former
}

// ReadSnapshot reads the state file at path without writing it. A file
// the running agent holds locked is copied first and the copy read: a
// bbolt file is consistent at its last committed meta page.
func ReadSnapshot(path string) (Snapshot, error) {
	if _, err := os.Stat(path); err != nil {
		return Snapshot{}, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if errors.Is(err, berrors.ErrTimeout) {
		copyPath, cerr := copyFile(path)
		if cerr != nil {
			return Snapshot{}, fmt.Errorf("read %s (held by the agent): %w", path, cerr)
		}
		defer os.RemoveAll(filepath.Dir(copyPath))
		db, err = bbolt.Open(copyPath, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer db.Close()
	snap := Snapshot{Former: map[string]Former{}}
	err = db.View(func(tx *bbolt.Tx) error {
		var err error
		if snap.Volumes, _, err = load(tx); err != nil {
			return err
		}
		b := tx.Bucket(bucketFormer)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var f Former
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("former %q: %w", k, err)
			}
			snap.Former[string(k)] = f
			return nil
		})
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("read %s: %w", path, err)
	}
	return snap, nil
}

func copyFile(path string) (string, error) {
	dir, err := os.MkdirTemp("", "volumed-state-")
	if err != nil {
		return "", err
	}
	in, err := os.Open(path)
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	defer in.Close()
	dst := filepath.Join(dir, "state.db")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dst, nil
}
