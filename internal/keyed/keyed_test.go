package keyed

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestMutexSerializesOneKeyOnly(t *testing.T) {
	var k Mutex
	unlockA := k.Lock("a")
	// Another key is not held up by "a".
	done := make(chan struct{})
	go func() { k.Lock("b")(); close(done) }()
	<-done
	// The same key waits for its release.
	var mu sync.Mutex
	order := []string{}
	got := make(chan struct{})
	go func() {
		defer close(got)
		unlock := k.Lock("a")
		mu.Lock()
		order = append(order, "second")
		mu.Unlock()
		unlock()
	}()
	select {
	case <-got:
		t.Fatal("a second Lock of the same key did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	order = append(order, "first")
	mu.Unlock()
	unlockA()
	<-got
	if order[0] != "first" || order[1] != "second" {
		t.Fatalf("order %v", order)
	}
}

func TestSleepHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
