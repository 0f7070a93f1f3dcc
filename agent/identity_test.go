package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// Identities outlive the store being closed and opened again (a
// reboot); learning one part keeps the other; another source replaces
// the whole; forgetting drops it.
func TestIdentitiesKeptAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	open := func() (*store.Store, *identities) {
		st, _, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ids := &identities{store: st}
		if err := ids.load(); err != nil {
			t.Fatal(err)
		}
		return st, ids
	}
	st, ids := open()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ids.learn("v", "k1", decide.PartLUKS, "cccc", "formatted"))
	must(ids.learn("v", "k1", decide.PartFilesystem, "aaaa", "formatted"))
	must(st.Close())

	st, ids = open()
	if got := ids.get("v"); got == nil || got.Source != "k1" || got.LUKS != "cccc" || got.Filesystem != "aaaa" || got.How != "formatted" || got.UpdatedAt.IsZero() {
		t.Fatalf("after reopen: %+v", got)
	}
	must(ids.learn("v", "k2", decide.PartFilesystem, "bbbb", "adopted"))
	if got := ids.get("v"); got.LUKS != "" || got.Filesystem != "bbbb" || got.Source != "k2" {
		t.Errorf("another source: %+v", got)
	}
	must(ids.forget("v"))
	must(st.Close())
	st, ids = open()
	defer st.Close()
	if got := ids.get("v"); got != nil {
		t.Errorf("forgotten identity back after reopen: %+v", got)
	}
}

// An encrypted volume whose device, between a close and the next open
// (a reboot), carries another LUKS2 header: not opened, IdentityChanged
// names both UUIDs; its own header back, it opens. A blank device in its
// place is not encrypted either.
func TestOpenRefusesAnotherLUKSHeader(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k1")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	ours := f.headers["/dev/fake-a"]
	if id := a.idents.get("a"); id == nil || id.LUKS != ours.uuid || id.How != "formatted" {
		t.Fatalf("identity after the encrypt: %+v, want the header %s", id, ours.uuid)
	}
	if err := a.opClose(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	other := fakeHeader{uuid: "0ther000-0000-4000-8000-000000000000", keys: []string{"/etc/k1"}}
	for _, c := range []struct {
		name   string
		header *fakeHeader
		words  []string
	}{
		{"another header", &other, []string{ours.uuid, other.uuid}},
		{"a blank device", nil, []string{ours.uuid, "blank"}},
	} {
		f.mu.Lock()
		if c.header != nil {
			f.headers["/dev/fake-a"] = *c.header
		} else {
			delete(f.headers, "/dev/fake-a")
		}
		f.mu.Unlock()
		formats, opens := f.formats, f.opens
		err := a.opOpen(ctx, d)
		if !errors.Is(err, ErrIdentityChanged) {
			t.Errorf("%s: open: %v, want ErrIdentityChanged", c.name, err)
		}
		if f.formats != formats || f.opens != opens {
			t.Errorf("%s: formats %d→%d, opens %d→%d; want none", c.name, formats, f.formats, opens, f.opens)
		}
		cond := a.conds.Of("a")
		if len(cond) != 1 || cond[0].Type != CondIdentityChanged || !containsAll(cond[0].Message, c.words) {
			t.Errorf("%s: conditions %+v, want IdentityChanged naming %v", c.name, cond, c.words)
		}
	}
	f.mu.Lock()
	f.headers["/dev/fake-a"] = ours
	f.mu.Unlock()
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatalf("its own header back: %v", err)
	}
	if cond := a.conds.Of("a"); len(cond) != 0 {
		t.Errorf("conditions with its own header back: %+v", cond)
	}
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// An identity learnt is on disk when learn returns: a crash right after
// (the state file as a SIGKILL leaves it, copied before any later commit
// could carry it) keeps it. Queued to ride a later commit, it was lost
// when the agent was killed within that commit's delay, and the next
// start, after a reboot that put another disk at the path, learnt that
// disk as the volume's.
func TestLearntIdentitySurvivesACrashRightAfter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st, _, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids := &identities{store: st}
	if err := ids.load(); err != nil {
		t.Fatal(err)
	}
	if err := ids.learn("v", "k1", decide.PartFilesystem, "aaaa", "adopted"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(crashed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	after, _, err := store.Open(crashed, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	got, err := after.Identities()
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := got["v"]; !ok || id.Filesystem != "aaaa" || id.Source != "k1" {
		t.Errorf("identity after a crash right after it was learnt: %+v (found %v); want filesystem aaaa on k1", id, ok)
	}
}
