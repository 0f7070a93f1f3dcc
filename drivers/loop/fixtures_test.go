package loop

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/testns"
)

func TestMain(m *testing.M) { testns.Main(m) }

const mib = 1 << 20

func newImage(tb testing.TB, dir, name string, size int64) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	created, err := EnsureImage(p, size)
	if err != nil || !created {
		tb.Fatalf("EnsureImage(%s) = %v, %v; want created", p, created, err)
	}
	return p
}

// attachT attaches and registers a detach that runs even if the test fails.
func attachT(tb testing.TB, o Options) *Device {
	tb.Helper()
	d, err := Attach(context.Background(), o)
	if err != nil {
		tb.Fatalf("Attach(%+v): %v", o, err)
	}
	tb.Cleanup(func() { cleanupDetach(tb, *d) })
	return d
}

func cleanupDetach(tb testing.TB, d Device) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Detach(ctx, d); err != nil && !errors.Is(err, ErrIdentity) {
		tb.Errorf("cleanup: %v", err)
	}
}

// boundTo reports whether loop device n currently backs d's file. Other
// packages' tests may bind a device number we just released, so "unbound"
// is checked as "no longer ours".
func boundTo(t *testing.T, n int, d Device) bool {
	t.Helper()
	cur, err := Get(n)
	if err != nil {
		t.Fatalf("Get(%d): %v", n, err)
	}
	return cur != nil && cur.sameFile(d)
}

func readSys(t *testing.T, n int, elem ...string) string {
	t.Helper()
	b, err := os.ReadFile(sysPath(n, elem...))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Sync()
}
