package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/store"
)

// reportTarget reads one report (a driver's lvm2 vgs, say) through the
// context's window at each question the core asks of it.
type reportTarget struct {
	oneDisk
	runs atomic.Int32
}

func (r *reportTarget) report(ctx context.Context) {
	_, _ = readonce.Read(ctx, "report", func() ([]byte, error) {
		r.runs.Add(1)
		return []byte("{}"), nil
	})
}

func (r *reportTarget) ListOwned(ctx context.Context) ([]store.Attachment, error) {
	r.report(ctx)
	return nil, nil
}

func (r *reportTarget) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	r.report(ctx)
	return at.Device, true, nil
}

func (r *reportTarget) Health(ctx context.Context, _ *Desired, _ store.Attachment) (SourceHealth, error) {
	r.report(ctx)
	return SourceHealth{}, nil
}

// The core asks a driver's questions within windows (internal/readonce):
// a start (the kernel's list, each volume's check, each health check),
// a resync's drift and health checks and an operation each read a
// report once, however many volumes ask; the next look reads it again.
func TestTheCoreLooksOnceAWindow(t *testing.T) {
	a := sessionAgent(t, nil)
	r := &reportTarget{}
	a.cfg.Attachers = map[string]Attacher{"fake": r}
	var recs []*store.Volume
	for _, name := range []string{"a", "b", "c"} {
		recs = append(recs, &store.Volume{Name: name, Kind: "fake", Attachment: &store.Attachment{Kind: "fake", Device: "/dev/fake-" + name, Identity: "fake:" + name, Owned: true}})
	}
	restartWith(t, a, recs)
	if n := r.runs.Swap(0); n != 1 {
		t.Errorf("a start of three volumes read the report %d times, want once", n)
	}
	a.verify(context.Background())
	if n := r.runs.Swap(0); n != 1 {
		t.Errorf("a drift check of three volumes read the report %d times, want once", n)
	}
	e := NewExecutor(2, time.Now)
	done := make(chan error, 1)
	op := func(ctx context.Context) error { r.report(ctx); r.report(ctx); return nil }
	if ok, _ := e.Start(context.Background(), "a", OpAttach, op, func(err error) { done <- err }); !ok {
		t.Fatal("the operation did not start")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.runs.Swap(0); n != 1 {
		t.Errorf("an operation asking twice read the report %d times, want once", n)
	}
}
