//go:build !crashpoints

package store

// faults is empty in production builds: no write ever fails on purpose.
type faults struct{}

func newFaults() *faults { return nil }

func (s *Store) fault(op, stage string) error { return nil }
func (s *Store) noteOp(id uint64, op string)  {}
func (s *Store) opOf(id uint64) string        { return "" }
