// Opening the state file: the lock, the damage checks, moving a damaged file aside, the clean-close marker.

package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/volumed/volumed/internal/durable"

	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// openChecked returns an open, schema-checked db, or a reason why the file is damaged, or an
// error that is not about damage (lock held, checker unavailable, I/O while initialising).
func openChecked(path string, check func(string) error) (db *bbolt.DB, first *loaded, reason string, err error) {
	fi, statErr := os.Stat(path)
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return nil, nil, "", fmt.Errorf("open state: %w", statErr)
	}
	// An empty or missing file is one bbolt is about to initialise; there is nothing to check.
	if statErr == nil && fi.Size() > 0 {
		if err := PrecheckFile(path); err != nil {
			return nil, nil, err.Error(), nil
		}
		if check != nil {
			if err := check(path); err != nil {
				if errors.Is(err, ErrCheckUnavailable) {
					return nil, nil, "", fmt.Errorf("open state %s: %w", path, err)
				}
				// The child's read-only open fails if a writer took the file meanwhile.
				if lerr := ensureUnlocked(path); lerr != nil {
					return nil, nil, "", lerr
				}
				return nil, nil, fmt.Sprintf("check: %v", err), nil
			}
		}
	}

	db, reason, err = boltOpen(path)
	if err != nil {
		return nil, nil, "", err
	}
	if db == nil {
		if reason == "" {
			return nil, nil, "", fmt.Errorf("open state %s: %w (another volumed running?)", path, ErrLocked)
		}
		return nil, nil, reason, nil
	}
	if first, reason, err = initSchema(db); err != nil || reason != "" {
		_ = db.Close()
		return nil, nil, reason, err
	}
	return db, first, "", nil
}

// boltOpen opens the file with bbolt, turning a panic into a reason. A nil db with an empty
// reason means the lock is held. A file that cannot be opened for writing (a read-only state
// filesystem, no permission) is an error, not damage: moving a healthy file aside would lose it.
func boltOpen(path string) (db *bbolt.DB, reason string, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, reason = nil, fmt.Sprintf("bbolt open panicked: %v", r)
		}
	}()
	// Defence in depth behind PrecheckFile: a fault on the mapping in this goroutine becomes a
	// panic that the recover above turns into a reason.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// Timeout: a second agent on the same file fails on the flock instead of waiting forever.
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, "", nil
	case errors.Is(err, unix.EROFS):
		return nil, "", fmt.Errorf("open state %s: the state dir %s is read-only (remount it read-write, or give --state-dir a writable place): %w", path, filepath.Dir(path), err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return nil, "", fmt.Errorf("open state %s: not writable by volumed (run as root; check the file's attributes with lsattr): %w", path, err)
	case err != nil:
		return nil, fmt.Sprintf("bbolt open: %v", err), nil
	}
	return db, "", nil
}

// initSchema creates the buckets of a fresh file, and for an existing file verifies the schema
// version and that every record decodes, so that damage inside the data is found here, where the
// file can still be moved aside, rather than in the agent's Load.
func initSchema(db *bbolt.DB) (first *loaded, reason string, err error) {
	fresh := false
	reason = safeView(db, func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
			if !empty {
				return errors.New("not a volumed state file (no meta bucket)")
			}
			fresh = true
			return nil
		}
		if v := string(meta.Get(keySchema)); v != strconv.Itoa(SchemaVersion) {
			return fmt.Errorf("unknown schema version %q (this volumed knows %d)", v, SchemaVersion)
		}
		vols, intents, err := load(tx)
		first = &loaded{vols, intents}
		return err
	})
	if reason != "" {
		return nil, reason, nil
	}
	// Buckets missing from a known-schema file (or all of them, in a fresh one) are created; this
	// commit is also the first fsync of a new file.
	if !fresh {
		ok := true
		_ = db.View(func(tx *bbolt.Tx) error {
			ok = tx.Bucket(bucketVolumes) != nil && tx.Bucket(bucketIntents) != nil
			return nil
		})
		if ok {
			return first, "", nil
		}
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketVolumes, bucketIntents} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return nil, "", fmt.Errorf("initialise state file: %w", err)
	}
	return nil, "", nil
}

// safeView runs fn in a read transaction; an error or a panic (a damaged page) becomes a reason.
func safeView(db *bbolt.DB, fn func(*bbolt.Tx) error) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("reading state panicked: %v", r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := db.View(fn); err != nil {
		return err.Error()
	}
	return ""
}

// ensureUnlocked fails with ErrLocked if any other open file description holds a flock on path
// (bbolt locks exclusively for writers, shared for readers).
func ensureUnlocked(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open state: %w", err)
	}
	defer f.Close() // releases the probe lock
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("open state %s: %w (another volumed running?)", path, ErrLocked)
	}
	if err != nil {
		return fmt.Errorf("open state %s: flock: %w", path, err)
	}
	return nil
}

// moveAside renames the damaged file to a name that does not exist yet and makes the rename
// durable; the bytes are kept for a post-mortem.
func moveAside(path string, now func() time.Time) (string, error) {
	base := path + ".corrupt-" + now().UTC().Format("20060102T150405Z")
	dst := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", err
		}
		dst = fmt.Sprintf("%s.%d", base, i)
	}
	if err := os.Rename(path, dst); err != nil {
		return "", err
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	return dst, nil
}

func cleanMarker(path string) string { return path + ".clean" }

// fileStamp names the file's exact content: its size and a SHA-256 of
// its bytes (an mtime alone can miss a write within one clock tick). A
// state file is small; hashing it costs far less than the child check.
func fileStamp(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%d %x\n", n, h.Sum(nil)), true
}

// writeCleanMarker is best effort: without it the next start checks the file in full.
func writeCleanMarker(path string) {
	if stamp, ok := fileStamp(path); ok {
		_ = os.WriteFile(cleanMarker(path), []byte(stamp), 0o600)
	}
}

func closedCleanly(path string) bool {
	b, err := os.ReadFile(cleanMarker(path))
	stamp, ok := fileStamp(path)
	return err == nil && ok && string(b) == stamp
}
