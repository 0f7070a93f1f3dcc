package store

import (
	"errors"
	"time"

	"go.etcd.io/bbolt"
)

// maxBatch bounds one transaction so a flood of callers cannot build an unbounded one.
const maxBatch = 256

// rideDelay is how long writes that nobody waits for (outcomes queued by
// FinishLater) wait for a write somebody waits for, whose fsync they then
// share. Committed at once, each cost an fsync of its own and delayed the
// next intent by as much: with many volumes coming up, about a third of
// the commits carried outcomes alone. Losing them in a crash is harmless
// (their intents are still on disk), so the delay bounds only how long a
// failing commit goes unnoticed.
const rideDelay = 50 * time.Millisecond

// request is one caller's write, waiting for the commit goroutine.
type request struct {
	fn   func(*bbolt.Tx) error
	done chan error
	// failed is told when a queued-only request could not be committed.
	failed func(error)
	// flush: nobody waits, but the batch must not ride (Flush).
	flush bool
}

// answer tells a waiting caller the outcome, and a queued-only one its
// failure.
func (r *request) answer(err error) {
	if r.done != nil {
		r.done <- err
	}
	if err != nil && r.failed != nil {
		r.failed(err)
	}
}

// errBatchMember aborts a shared transaction when one member fails; the members are re-run.
var errBatchMember = errors.New("batch member failed")

// do queues fn and waits until it is durable (or failed). Callers that arrive while a commit is
// in flight are taken together into the next one, so N parallel callers cost about one fsync
// each round instead of N. Unlike db.Batch there is no timer: a lone caller commits at once.
func (s *Store) do(fn func(*bbolt.Tx) error) error {
	r := &request{fn: fn, done: make(chan error, 1)}
	if err := s.send(r); err != nil {
		return err
	}
	return <-r.done
}

// send hands r to the commit goroutine. The read lock keeps Close from
// closing quit between the closed check and the send, so every request
// that got in is committed and answered by the final drain.
func (s *Store) send(r *request) error {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	if s.closing {
		return ErrClosed
	}
	if r.done == nil && !r.flush {
		s.later.Add(1)
	}
	s.reqs <- r
	return nil
}

// loop is the commit goroutine, owned by the Store: started by Open, stopped by Close.
func (s *Store) loop() {
	defer close(s.done)
	for {
		var batch []*request
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		case <-s.quit:
			// Writes queued without waiting still go to disk.
			s.commitRest(batch)
			return
		}
		batch = s.gather(batch)
		if !waited(batch) && len(batch) < maxBatch {
			var quit bool
			batch, quit = s.ride(batch)
			if quit {
				s.commitRest(batch)
				return
			}
		}
		s.commit(batch)
	}
}

// gather adds what is queued now, up to maxBatch.
func (s *Store) gather(batch []*request) []*request {
	for len(batch) < maxBatch {
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// ride holds a batch that nobody waits for until a request somebody
// waits for joins it, rideDelay passes, or the store closes (quit).
func (s *Store) ride(batch []*request) ([]*request, bool) {
	t := time.NewTimer(rideDelay)
	defer t.Stop()
	for !waited(batch) && len(batch) < maxBatch {
		select {
		case r := <-s.reqs:
			batch = s.gather(append(batch, r))
		case <-t.C:
			return batch, false
		case <-s.quit:
			return batch, true
		}
	}
	return batch, false
}

// commitRest commits batch and everything still queued, at Close.
func (s *Store) commitRest(batch []*request) {
	for {
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		default:
			if len(batch) > 0 {
				s.commit(batch)
			}
			return
		}
	}
}

// waited: somebody waits for the batch's fsync, or asked for it (Flush).
func waited(batch []*request) bool {
	for _, r := range batch {
		if r.done != nil || r.flush {
			return true
		}
	}
	return false
}

// Flush has the outcomes queued by FinishLater committed now instead of
// after rideDelay, without waiting for it: for when no intent is coming
// to carry them (the agent has converged), so that a power cut right
// after leaves no intent to resolve. At most one flush is queued at a
// time, so a commit stuck in the kernel (a frozen state filesystem)
// never fills the queue with them.
func (s *Store) Flush() {
	if s.later.Load() == 0 || !s.flushing.CompareAndSwap(false, true) {
		return
	}
	if err := s.send(&request{fn: func(*bbolt.Tx) error { return nil }, flush: true}); err != nil {
		s.flushing.Store(false)
	}
}

// commit applies the batch in one transaction and answers every member. When a member fails the
// transaction is rolled back, the failing member runs alone (its answer is its own error, or
// success if it only failed because of an earlier member's writes), and the rest are re-run.
func (s *Store) commit(batch []*request) {
	for _, r := range batch {
		switch {
		case r.flush:
			s.flushing.Store(false)
		case r.done == nil:
			s.later.Add(-1)
		}
	}
	for len(batch) > 0 {
		failed, failErr := -1, error(nil)
		start := time.Now()
		s.wrote.Store(true)
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for i, r := range batch {
				if err := r.fn(tx); err != nil {
					failed, failErr = i, err
					return errBatchMember
				}
			}
			return nil
		})
		if failed < 0 {
			// Success, or a commit error (write or fsync) that every member shares.
			if err == nil {
				s.committed(time.Since(start), len(batch))
			}
			for _, r := range batch {
				r.answer(err)
			}
			return
		}
		r := batch[failed]
		if failed == 0 {
			// Nothing ran before it in that transaction: it already failed alone.
			r.answer(failErr)
		} else {
			r.answer(s.commitAlone(r))
		}
		batch = append(batch[:failed:failed], batch[failed+1:]...)
	}
}

func (s *Store) commitAlone(r *request) error {
	start := time.Now()
	s.wrote.Store(true)
	err := s.db.Update(r.fn)
	if err == nil {
		s.committed(time.Since(start), 1)
	}
	return err
}

func (s *Store) committed(d time.Duration, callers int) {
	s.commits.Add(1)
	if s.onCommit != nil {
		s.onCommit(d, callers)
	}
}
