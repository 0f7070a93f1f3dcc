package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

const (
	// checkEnv makes the test binary act as cmd/volumed's hidden check subcommand.
	checkEnv = "VOLUMED_STORE_CHECK"
	// rawOpenEnv makes the test binary do what Open must never do: let bbolt read an unchecked
	// file in-process, to show that the fault really happens and only kills the child.
	rawOpenEnv = "VOLUMED_STORE_RAWOPEN"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(checkEnv); p != "" {
		if err := CheckFile(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if p := os.Getenv(rawOpenEnv); p != "" {
		os.Exit(rawOpen(p))
	}
	os.Exit(m.Run())
}

func rawOpen(path string) int {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	n := 0
	_ = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error { n += len(k) + len(v); return nil })
		})
	})
	fmt.Fprintln(os.Stderr, "read", n, "bytes without faulting")
	return 0
}

// childCommand re-executes the test binary with env set to path.
func childCommand(env string) func(string) error {
	return func(p string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env+"="+p)
		return runChild(ctx, cmd)
	}
}

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testOpts() Options {
	return Options{Now: func() time.Time { return testNow }, Check: childCommand(checkEnv)}
}

func mustOpen(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, rec, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if rec != nil {
		t.Fatalf("Open of a healthy file recovered: %+v", rec)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sampleVolume(name string) *Volume {
	return &Volume{
		Name:       name,
		Kind:       "loop",
		Attachment: &Attachment{Kind: "loop", Device: "/dev/loop3", Identity: "loop:/img/" + name + ".img@2049:1234", Owned: true},
		Staging:    &MountRecord{Path: "/var/lib/volumed/staging/" + name, Device: "/dev/loop3", FSType: "ext4", MountID: 42, Owned: true},
		Targets: []MountRecord{
			{Path: "/srv/" + name, SubPath: "data", ReadOnly: true, MountID: 43, Owned: true},
			{Path: "/mnt/" + name, Owned: false},
		},
		UpdatedAt: testNow.Add(-time.Hour),
	}
}
