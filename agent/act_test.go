package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// A pass plans from a snapshot; an operation of the volume that finishes
// before the plan is acted on makes the plan stale. Acting on it anyway
// ran the operation twice (in the bench, a second mount_device that then
// remounted), each time with an intent and its fsync.
func TestStalePlanIsNotActedOn(t *testing.T) {
	ctx := context.Background()
	f := &fakeTarget{}
	a := sessionAgent(t, f)
	desired := map[string]*Desired{"a": netVolume("a")}

	actual, versions := a.state.VersionedSnapshot()
	dec := decide.Decide(desired, actual, decide.Observations{})
	if len(dec.Ops) != 1 || dec.Ops[0].Name != OpAttach {
		t.Fatalf("plan %+v, want one attach", dec.Ops)
	}
	// The attach of an earlier pass finishes after the snapshot.
	if err := a.opAttach(ctx, desired["a"]); err != nil {
		t.Fatal(err)
	}

	if started := a.act(ctx, dec, desired, actual, versions); started == 0 {
		t.Error("act reported nothing pending although the volume must be planned again (convergence would be claimed early)")
	}
	a.exec.Wait()
	if h := a.history.of("a"); len(h) != 0 {
		t.Errorf("the stale attach ran again: %+v", h)
	}
	select {
	case <-a.trigger:
	default:
		t.Error("no pass was asked for to plan the volume again")
	}

	// A fresh snapshot plans and acts normally.
	actual, versions = a.state.VersionedSnapshot()
	dec = decide.Decide(desired, actual, decide.Observations{})
	if len(dec.Ops) != 1 || dec.Ops[0].Name != OpMountDevice {
		t.Fatalf("after the attach the plan is %+v, want mount_device", dec.Ops)
	}
	if started := a.act(ctx, dec, desired, actual, versions); started != 1 {
		t.Errorf("act on a fresh plan started %d operations, want 1", started)
	}
	a.exec.Wait()
	if h := a.history.of("a"); len(h) != 1 || h[0].Op != OpMountDevice {
		t.Errorf("after acting on the fresh plan the history is %+v, want one mount_device (whatever its outcome with this fixture, which has no filesystem)", h)
	}
}

// Unpublish and unmount_device write no intent before they touch the
// kernel: what they remove is named by paths that are ours alone (a bind
// of our staging mount, staging/<volume>), so reconstruction reads their
// outcome in the kernel whenever a crash comes (the crash-point matrix of
// test/e2e, after-kernel and after a reboot). Their records still reach
// the disk, with the detach's intent.
func TestMountTeardownWritesNoIntent(t *testing.T) {
	ctx := context.Background()
	a := sessionAgent(t, &fakeTarget{})
	st := a.cfg.Store.(*store.Store)
	m := &fakeMounter{mounted: map[string]bool{}}
	a.cfg.Mounter = m
	if err := a.opAttach(ctx, netVolume("a")); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	staging := a.stagingPath("a")
	rec.Staging = &store.MountRecord{Path: staging, MountID: 7, Owned: true}
	rec.Targets = []store.MountRecord{{Path: "/srv/a", MountID: 7, Owned: true}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}
	m.mounted[staging], m.mounted["/srv/a"] = true, true
	m.onUnmount = func(p string) {
		if _, intents, err := st.Load(); err != nil || len(intents) != 0 {
			t.Errorf("unmounting %s with intents %+v on disk (%v); want none", p, intents, err)
		}
	}
	if err := a.opUnpublish(ctx, "a", "fake", "/srv/a"); err != nil {
		t.Fatal(err)
	}
	if err := a.opUnmountDevice(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	if len(m.mounted) != 0 {
		t.Fatalf("still mounted: %v", m.mounted)
	}
	if err := a.opDetach(ctx, "a", "fake"); err != nil {
		t.Fatal(err)
	}
	// The detach's intent commit carried the outcomes before it (its own
	// outcome may have followed by now).
	vols, intents, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range intents {
		if in.Op != OpDetach {
			t.Errorf("intent %+v on disk; want the detach's at most", in)
		}
	}
	if v := vols["a"]; v != nil && (v.Staging != nil || len(v.Targets) != 0) {
		t.Errorf("record on disk after the teardown: %+v; want no staging, no targets", v)
	}
}

// mountingFake is a mounter whose mounts show, and that calls onMount
// before each mount or bind.
type mountingFake struct {
	fakeMounter
	onMount func(p string)
}

func (m *mountingFake) MountDevice(_, p, _ string, _ []string) error {
	m.onMount(p)
	m.mounted[p] = true
	return nil
}

func (m *mountingFake) Bind(_, _, p string, _ BindOptions) error {
	m.onMount(p)
	m.mounted[p] = true
	return nil
}

// probedFS shows sigs on every device and counts its mkfs runs.
type probedFS struct {
	fakeFS
	sigs  []Signature
	mkfss int
}

func (f *probedFS) Probe(context.Context, string) ([]Signature, error) { return f.sigs, nil }
func (f *probedFS) Mkfs(context.Context, string, string, string, []string) error {
	f.mkfss++
	return nil
}

// The staging mount of a device that needs no format is made with no
// intent on disk: the kernel shows it by a path of ours
// (staging/<volume>), and start-up adopts it there (the crash-point
// matrix of test/e2e, after-kernel and after a reboot). A target keeps
// its intent: a bind mount does not name its owner, and a target no
// manifest names any more after a crash is found only by the intent
// (TestCrashMidPublishThenRemoved).
// After a format the mount's intent is durable before the mount: it
// carries the format's outcome to disk, so a power cut can never leave
// the format's intent beside a filesystem already in use.
func TestSetupWritesIntentsOnlyAroundAFormat(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sigs       []Signature
		wantMkfs   int
		wantOnDisk map[string][]string // path mounted -> intents on disk then
	}{
		{"formatted already", []Signature{{Type: "ext4", Usage: "filesystem"}}, 0,
			map[string][]string{"staging": nil, "/srv/a": {OpPublish}}},
		{"blank", nil, 1,
			map[string][]string{"staging": {OpMountDevice}, "/srv/a": {OpPublish}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a := sessionAgent(t, &fakeTarget{})
			st := a.cfg.Store.(*store.Store)
			fs := &probedFS{sigs: tc.sigs}
			a.cfg.FS = fs
			staging := a.stagingPath("a")
			got := map[string][]string{}
			m := &mountingFake{fakeMounter: fakeMounter{mounted: map[string]bool{}}}
			m.onMount = func(p string) {
				_, intents, err := st.Load()
				if err != nil {
					t.Fatal(err)
				}
				own := OpPublish
				if p == staging {
					p, own = "staging", OpMountDevice
				}
				// The intents of the mount's own operation and of the
				// format; those before may still wait to ride a commit.
				got[p] = []string{}
				for _, in := range intents {
					if in.Op == own || in.Op == OpFormat {
						got[p] = append(got[p], in.Op)
					}
				}
			}
			a.cfg.Mounter = m
			d := netVolume("a")
			d.Spec.Filesystem = &manifest.Filesystem{Type: "ext4"}
			target := DesiredTarget{Path: "/srv/a"}
			d.Targets = []DesiredTarget{target}
			if err := a.opAttach(ctx, d); err != nil {
				t.Fatal(err)
			}
			if err := a.opMountDevice(ctx, d); err != nil {
				t.Fatal(err)
			}
			if err := a.opPublish(d, target); err != nil {
				t.Fatal(err)
			}
			if fs.mkfss != tc.wantMkfs {
				t.Errorf("mkfs ran %d times, want %d", fs.mkfss, tc.wantMkfs)
			}
			for p, want := range tc.wantOnDisk {
				if !slices.Equal(got[p], want) && len(got[p])+len(want) > 0 {
					t.Errorf("mounting %s with intents %v on disk, want %v", p, got[p], want)
				}
				if _, ok := got[p]; !ok {
					t.Errorf("%s never mounted", p)
				}
			}
			// Converged, the outcomes reach the disk without an intent
			// to carry them.
			st.Flush()
			rec := a.state.Get("a")
			if rec == nil || rec.Staging == nil || len(rec.Targets) != 1 {
				t.Fatalf("record %+v; want staged and one target", rec)
			}
		})
	}
}

// intentSpy is an attacher whose Detach notes the intents on disk then.
type intentSpy struct {
	fakeTarget
	st      *store.Store
	onDisk  []string
	detachs int
}

func (s *intentSpy) Detach(ctx context.Context, at store.Attachment) error {
	s.detachs++
	_, intents, err := s.st.Load()
	if err != nil {
		return err
	}
	for _, in := range intents {
		s.onDisk = append(s.onDisk, in.Op)
	}
	return s.fakeTarget.Detach(ctx, at)
}

// selfNamedSpy is one whose attachments start-up finds by identity and
// marker alone (a loop device).
type selfNamedSpy struct{ intentSpy }

func (s *selfNamedSpy) ListOwned(context.Context) ([]store.Attachment, error) { return nil, nil }
func (s *selfNamedSpy) DetachNeedsNoIntent()                                  {}

// A detach writes its intent before the kernel is touched unless start-up
// can tell how far it got from the kernel alone (SelfNamedDetacher: a
// loop device, by its backing file's identity and our tag); a network
// session, shared and unmarked, keeps its intent. The crash-point matrix
// of test/e2e (detach, after-intent and after-kernel, each with a
// reboot) shows a loop device's detach neither leaked nor redone.
func TestDetachWritesIntentOnlyWhenTheKernelCannotTell(t *testing.T) {
	for _, selfNamed := range []bool{false, true} {
		ctx := context.Background()
		a := sessionAgent(t, nil)
		st := a.cfg.Store.(*store.Store)
		spy := &selfNamedSpy{intentSpy{st: st}}
		var att Attacher = &spy.intentSpy
		if selfNamed {
			att = spy
		}
		a.cfg.Attachers = map[string]Attacher{"fake": att}
		if err := a.opAttach(ctx, netVolume("a")); err != nil {
			t.Fatal(err)
		}
		st.Flush()
		if err := a.opDetach(ctx, "a", "fake"); err != nil {
			t.Fatal(err)
		}
		want := []string{OpDetach}
		if selfNamed {
			want = nil
		}
		if spy.detachs != 1 || !slices.Equal(slices.DeleteFunc(spy.onDisk, func(op string) bool { return op == OpAttach }), want) {
			t.Errorf("self-named %v: %d detaches, intents on disk while detaching %v; want 1 and %v", selfNamed, spy.detachs, spy.onDisk, want)
		}
		if rec := a.state.Get("a"); rec != nil && rec.Attachment != nil {
			t.Errorf("self-named %v: still attached after the detach: %+v", selfNamed, rec)
		}
	}
}
