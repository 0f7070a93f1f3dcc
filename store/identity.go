// Identities: what a volume's data was when volumed formatted or first
// adopted it, kept apart from the records of actual state. A record is
// dropped when a volume's device goes (a reboot, a detach); an identity
// outlives it, so that the device found at the same path after a reboot
// can be compared with the one the volume had.

package store

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"
)

var bucketIdentities = []byte("identities")

// Identities reads every volume's identity.
func (s *Store) Identities() (map[string]Identity, error) {
	out := map[string]Identity{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIdentities)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var id Identity
			if err := json.Unmarshal(v, &id); err != nil {
				return fmt.Errorf("identity %q: %w", k, err)
			}
			out[string(k)] = id
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load identities: %w", err)
	}
	return out, nil
}

// PutIdentity keeps id durably before it returns (its commit is shared
// with whatever else is queued). Unlike an outcome it must not ride a
// later commit: nothing in the kernel can rebuild it after a crash, and
// the next sight after a reboot may be of another disk at the same path,
// which would then be learnt as the volume's.
func (s *Store) PutIdentity(id Identity) error {
	if id.Volume == "" {
		return errors.New("put identity: no volume")
	}
	if id.UpdatedAt.IsZero() {
		id.UpdatedAt = s.now()
	}
	data, err := json.Marshal(id)
	if err != nil {
		return fmt.Errorf("put identity %s: %w", id.Volume, err)
	}
	if err := s.fault("", "identity"); err != nil {
		return fmt.Errorf("put identity %s: %w", id.Volume, err)
	}
	err = s.do(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketIdentities)
		if err != nil {
			return err
		}
		return b.Put([]byte(id.Volume), data)
	})
	if err != nil {
		return fmt.Errorf("put identity %s: %w", id.Volume, err)
	}
	return nil
}

// DeleteIdentity forgets a volume's identity (the volume was taken down).
func (s *Store) DeleteIdentity(name string) error {
	err := s.do(func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bucketIdentities); b != nil {
			return b.Delete([]byte(name))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete identity %s: %w", name, err)
	}
	return nil
}
