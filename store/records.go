// Reading and writing records and intents.

package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"
)

// Load reads every volume record and every leftover intent (sorted by ID).
func (s *Store) Load() (map[string]*Volume, []Intent, error) {
	if first := s.takeFirst(); first != nil {
		return first.vols, first.intents, nil
	}
	var (
		vols    map[string]*Volume
		intents []Intent
	)
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		vols, intents, err = load(tx)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("load state: %w", err)
	}
	return vols, intents, nil
}

func load(tx *bbolt.Tx) (map[string]*Volume, []Intent, error) {
	vb, ib := tx.Bucket(bucketVolumes), tx.Bucket(bucketIntents)
	if vb == nil || ib == nil {
		return nil, nil, errors.New("missing bucket")
	}
	vols := map[string]*Volume{}
	err := vb.ForEach(func(k, v []byte) error {
		var vol Volume
		if err := json.Unmarshal(v, &vol); err != nil {
			return fmt.Errorf("volume %q: %w", k, err)
		}
		if vol.Name != string(k) {
			return fmt.Errorf("volume %q: record names %q", k, vol.Name)
		}
		vols[vol.Name] = &vol
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	// Big-endian keys make the cursor order the ID order.
	var intents []Intent
	err = ib.ForEach(func(k, v []byte) error {
		var in Intent
		if len(k) != 8 {
			return fmt.Errorf("intent key %x: not a 64-bit id", k)
		}
		if err := json.Unmarshal(v, &in); err != nil {
			return fmt.Errorf("intent %d: %w", binary.BigEndian.Uint64(k), err)
		}
		in.ID = binary.BigEndian.Uint64(k)
		intents = append(intents, in)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return vols, intents, nil
}

// Begin durably records an intent (fsync'd before it returns) and returns its ID. in.ID is
// ignored; a zero StartedAt is set to now.
func (s *Store) Begin(in Intent) (uint64, error) {
	if in.Volume == "" || in.Op == "" {
		return 0, fmt.Errorf("begin intent: volume and op are required (volume %q, op %q)", in.Volume, in.Op)
	}
	if in.StartedAt.IsZero() {
		in.StartedAt = s.now()
	}
	if err := s.fault(in.Op, "begin"); err != nil {
		return 0, fmt.Errorf("begin %s %s: %w", in.Op, in.Volume, err)
	}
	var id uint64
	err := s.do(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		in.ID = seq
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		if err := b.Put(intentKey(seq), data); err != nil {
			return err
		}
		// A batch that fails is re-run, so only the last run's ID counts.
		id = seq
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("begin %s %s: %w", in.Op, in.Volume, err)
	}
	s.noteOp(id, in.Op)
	return id, nil
}

// Finish atomically, in one durable transaction, deletes the intent and writes the outcome:
// v != nil puts the record v (keyed by v.Name); v == nil deletes the record of volume name.
func (s *Store) Finish(intentID uint64, name string, v *Volume) error {
	return s.finish(intentID, name, v, true, nil)
}

// FinishLater is Finish without waiting for the fsync: the outcome is
// committed with the current or next batch (and at Close). Losing it in a
// crash is harmless by design — the intent stays, and start-up resolves
// it by probing the kernel — so an operation need not wait for it, and
// the next intent's fsync carries it to disk. A commit that fails (a full
// or failing state filesystem) is not: failed, when set, is told, on the
// commit goroutine, so that the caller keeps the outcome and retries it
// (Settle); it must not block. A nil failed still does not wait.
func (s *Store) FinishLater(intentID uint64, name string, v *Volume, failed func(error)) error {
	return s.finish(intentID, name, v, false, failed)
}

// RecordLater is FinishLater for an operation that wrote no intent (its
// outcome the kernel shows by names of ours): op names it, for the
// fault tests.
func (s *Store) RecordLater(op, name string, v *Volume, failed func(error)) error {
	return s.record(0, op, name, v, false, failed)
}

// Settle durably resolves intents whose outcome could not be recorded:
// in one transaction it deletes them and writes v, the volume's record as
// it is now (nil deletes it).
func (s *Store) Settle(intentIDs []uint64, name string, v *Volume) error {
	data, err := s.recordData(name, v)
	if err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	if err := s.fault("", "settle"); err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	err = s.do(func(tx *bbolt.Tx) error {
		for _, id := range intentIDs {
			if err := tx.Bucket(bucketIntents).Delete(intentKey(id)); err != nil {
				return err
			}
		}
		return putRecord(tx, name, data)
	})
	if err != nil {
		return fmt.Errorf("settle %s: %w", name, err)
	}
	return nil
}

func (s *Store) recordData(name string, v *Volume) ([]byte, error) {
	if v == nil {
		if name == "" {
			return nil, errors.New("no volume name")
		}
		return nil, nil
	}
	if name != "" && name != v.Name {
		return nil, fmt.Errorf("volume %q given a record named %q", name, v.Name)
	}
	_, data, err := s.encode(v)
	return data, err
}

// putRecord writes a record, or deletes it when data is nil.
func putRecord(tx *bbolt.Tx, name string, data []byte) error {
	if data == nil {
		return tx.Bucket(bucketVolumes).Delete([]byte(name))
	}
	if err := noteFormer(tx, name, data); err != nil {
		return err
	}
	return tx.Bucket(bucketVolumes).Put([]byte(name), data)
}

func (s *Store) finish(intentID uint64, name string, v *Volume, wait bool, failed func(error)) error {
	return s.record(intentID, s.opOf(intentID), name, v, wait, failed)
}

func (s *Store) record(intentID uint64, op, name string, v *Volume, wait bool, failed func(error)) error {
	data, err := s.recordData(name, v)
	if err != nil {
		return fmt.Errorf("finish intent %d: %w", intentID, err)
	}
	if v != nil {
		name = v.Name
	}
	fn := func(tx *bbolt.Tx) error {
		if intentID != 0 { // 0: an operation that had no intent
			if err := tx.Bucket(bucketIntents).Delete(intentKey(intentID)); err != nil {
				return err
			}
		}
		return putRecord(tx, name, data)
	}
	if ferr := s.fault(op, "finish"); ferr != nil {
		fn = func(*bbolt.Tx) error { return ferr }
	}
	if wait {
		err = s.do(fn)
	} else {
		err = s.send(&request{fn: fn, failed: failed})
	}
	if err != nil {
		return fmt.Errorf("finish intent %d of %s: %w", intentID, name, err)
	}
	return nil
}

// Put writes a record without an intent (reconstruction adopting what it found).
func (s *Store) Put(v *Volume) error {
	if v == nil {
		return errors.New("put volume: nil record")
	}
	name, data, err := s.encode(v)
	if err != nil {
		return fmt.Errorf("put volume: %w", err)
	}
	if err := s.fault("", "put"); err != nil {
		return fmt.Errorf("put volume %s: %w", name, err)
	}
	if err := s.do(func(tx *bbolt.Tx) error { return putRecord(tx, name, data) }); err != nil {
		return fmt.Errorf("put volume %s: %w", name, err)
	}
	return nil
}

// Delete removes a record without an intent (reconstruction forgetting a volume).
func (s *Store) Delete(name string) error {
	if name == "" {
		return errors.New("delete volume: no name")
	}
	if err := s.fault("", "delete"); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	if err := s.do(func(tx *bbolt.Tx) error { return tx.Bucket(bucketVolumes).Delete([]byte(name)) }); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// DropIntent removes a resolved intent without touching records.
func (s *Store) DropIntent(id uint64) error {
	if err := s.do(func(tx *bbolt.Tx) error { return tx.Bucket(bucketIntents).Delete(intentKey(id)) }); err != nil {
		return fmt.Errorf("drop intent %d: %w", id, err)
	}
	return nil
}

// encode marshals a record, stamping a zero UpdatedAt on the stored copy only.
func (s *Store) encode(v *Volume) (string, []byte, error) {
	if v.Name == "" {
		return "", nil, errors.New("record has no name")
	}
	c := *v
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now()
	}
	data, err := json.Marshal(&c)
	return c.Name, data, err
}

func intentKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, id)
}
