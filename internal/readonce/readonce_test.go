package readonce

import (
	"context"
	"errors"
	"testing"
)

// counter is a report that says how many times it was read.
type counter struct{ n int }

func (c *counter) run() ([]byte, error) {
	c.n++
	return []byte{byte(c.n)}, nil
}

// In a window a report is read once; another window, or none, reads it
// again; a write drops it; a failed read is not kept.
func TestWindow(t *testing.T) {
	var c counter
	ctx := Open(context.Background())
	for range 3 {
		if out, err := Read(ctx, "vgs", c.run); err != nil || out[0] != 1 {
			t.Fatalf("Read = %v, %v: want the first read's answer", out, err)
		}
	}
	if _, ok := Held(ctx, "vgs"); !ok || c.n != 1 {
		t.Fatalf("after three asks in one window: %d reads, held %v; want one, held", c.n, ok)
	}
	if _, ok := Held(ctx, "lvs"); ok {
		t.Error("a report never read is held")
	}
	_, _ = Read(Open(ctx), "vgs", c.run)
	_, _ = Read(context.Background(), "vgs", c.run)
	if c.n != 3 {
		t.Errorf("a new window and no window read %d times in all, want 3", c.n)
	}
	if err := Write(ctx, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, ok := Held(ctx, "vgs"); ok {
		t.Error("the report is held after a write")
	}
	if out, _ := Read(ctx, "vgs", c.run); out[0] != 4 {
		t.Errorf("read after a write answered %v, want a new read", out)
	}
	failed := errors.New("exit status 5")
	for range 2 {
		if _, err := Read(ctx, "pvs", func() ([]byte, error) { c.n++; return nil, failed }); !errors.Is(err, failed) {
			t.Fatalf("a failed read returned %v", err)
		}
	}
	if c.n != 6 {
		t.Errorf("two asks of a failing report ran it %d times, want twice", c.n-4)
	}
}

// A read that ran across a write (a command beside it) is not kept: it
// may show the host half changed.
func TestAReadAcrossAWriteIsNotKept(t *testing.T) {
	ctx := Open(context.Background())
	_, _ = Read(ctx, "lvs", func() ([]byte, error) {
		_ = Write(ctx, func() error { return nil })
		return []byte("before"), nil
	})
	if _, ok := Held(ctx, "lvs"); ok {
		t.Error("a read that ran across a write is held")
	}
	// A write inside another: the window is dropped when each ends.
	_ = Write(ctx, func() error {
		_, _ = Read(ctx, "lvs", func() ([]byte, error) { return []byte("during"), nil })
		return nil
	})
	if _, ok := Held(ctx, "lvs"); ok {
		t.Error("a read made during a write is held after it")
	}
}
