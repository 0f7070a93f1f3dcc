package store

// The cost of a Begin/Finish pair, one writer and many.

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/bbolt"
)

// Benchmarks: one op is a Begin plus a Finish, the two durable writes of every operation.
// "group" goes through the Store's commit queue, "update-per-call" is a plain db.Update per write.

func benchStore(b *testing.B) *Store {
	s, _, err := Open(filepath.Join(b.TempDir(), "state.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func groupOp(s *Store, name string) error {
	id, err := s.Begin(Intent{Volume: name, Op: "publish"})
	if err != nil {
		return err
	}
	return s.Finish(id, name, &Volume{Name: name, Kind: "loop"})
}

// updateOp is the baseline: the same two writes, each its own db.Update and fsync.
func updateOp(s *Store, name string) error {
	var id uint64
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketIntents)
		var err error
		if id, err = b.NextSequence(); err != nil {
			return err
		}
		return b.Put(intentKey(id), []byte(`{"volume":"`+name+`","op":"publish"}`))
	})
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Delete(intentKey(id)); err != nil {
			return err
		}
		return tx.Bucket(bucketVolumes).Put([]byte(name), []byte(`{"name":"`+name+`","driver":"loop"}`))
	})
	return err
}

func BenchmarkBeginFinishSerial(b *testing.B) {
	b.Run("group", func(b *testing.B) {
		s := benchStore(b)
		before := s.Commits()
		for i := 0; b.Loop(); i++ {
			if err := groupOp(s, fmt.Sprintf("v%d", i%64)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(s.Commits()-before)/float64(b.N), "commits/op")
	})
	b.Run("update-per-call", func(b *testing.B) {
		s := benchStore(b)
		for i := 0; b.Loop(); i++ {
			if err := updateOp(s, fmt.Sprintf("v%d", i%64)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2, "commits/op")
	})
}

func BenchmarkBeginFinishParallel(b *testing.B) {
	// 32 goroutines whatever GOMAXPROCS is: many volumes' operations in flight at once.
	const goroutines = 32
	run := func(b *testing.B, op func(s *Store, name string) error) *Store {
		s := benchStore(b)
		ops := make(chan int)
		var wg sync.WaitGroup
		var errOnce sync.Once
		var firstErr error
		for g := range goroutines {
			wg.Go(func() {
				for i := range ops {
					if err := op(s, fmt.Sprintf("g%d-v%d", g, i%8)); err != nil {
						errOnce.Do(func() { firstErr = err })
					}
				}
			})
		}
		b.ResetTimer()
		for i := range b.N {
			ops <- i
		}
		close(ops)
		wg.Wait()
		b.StopTimer()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		return s
	}
	b.Run("group", func(b *testing.B) {
		s := run(b, groupOp)
		b.ReportMetric(float64(s.Commits())/float64(b.N), "commits/op")
	})
	b.Run("update-per-call", func(b *testing.B) {
		run(b, updateOp)
		b.ReportMetric(2, "commits/op")
	})
}
