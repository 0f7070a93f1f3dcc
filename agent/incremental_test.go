package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

// memStore takes records and drops them; any other call is a defect of
// the test (the embedded interface is nil).
type memStore struct{ Store }

func (memStore) Put(*store.Volume) error { return nil }
func (memStore) Delete(string) error     { return nil }

// manifestsAt hands the agent whatever the test last wrote.
type manifestsAt struct {
	vols map[string]*manifest.VolumeSpec
}

func (m *manifestsAt) Load() *manifest.Result {
	res := &manifest.Result{}
	for n, spec := range m.vols {
		res.Volumes = append(res.Volumes, &manifest.Object{Kind: "Volume", Metadata: manifest.Metadata{Name: n}, Volume: spec, File: n + ".yaml"})
	}
	return res
}

func propSeed(t *testing.T) uint64 {
	seed := uint64(27)
	if s := os.Getenv("VOLUMED_PROP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VOLUMED_PROP_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: VOLUMED_PROP_SEED=%d)", seed, seed)
	return seed
}

var (
	propManifests = []string{"a", "b", "c", "d"}
	propCSI       = []string{manifest.ReservedPrefix + "x", manifest.ReservedPrefix + "y"}
	propPaths     = []string{"/m", "/m/x", "/m/x/y", "/m/z", "/n"}
)

func randSpec(r *rand.Rand, names []string) *manifest.VolumeSpec {
	kind := []string{"loop", "net"}[r.IntN(2)]
	spec := &manifest.VolumeSpec{Source: manifest.Source{Kind: kind, Spec: map[string]int{"v": r.IntN(2)}}, Filesystem: &manifest.Filesystem{Type: "ext4"}}
	spec.Source.Caps.Key = kind + strconv.Itoa(r.IntN(2)) // a second key: the source changed
	if r.IntN(5) == 0 {
		spec.State = "absent"
	}
	for _, p := range propPaths {
		if r.IntN(4) == 0 {
			t := manifest.Target{Path: p, ReadOnly: r.IntN(2) == 0}
			if r.IntN(3) == 0 {
				t.NestedIn = names[r.IntN(len(names))]
			}
			spec.Mounts = append(spec.Mounts, t)
		}
	}
	return spec
}

func randRec(r *rand.Rand, name string) *store.Volume {
	kind := []string{"loop", "net"}[r.IntN(2)]
	v := &store.Volume{Name: name, Kind: kind}
	if r.IntN(4) != 0 {
		v.Attachment = &store.Attachment{Kind: kind, Device: "/dev/loop" + strconv.Itoa(r.IntN(3)), Identity: kind + ":" + name, Source: kind + strconv.Itoa(r.IntN(2))}
	}
	if r.IntN(2) == 0 {
		v.Staging = &store.MountRecord{Path: "/s/" + name, Owned: true, FSType: "ext4"}
	}
	for _, p := range propPaths {
		if r.IntN(5) == 0 {
			v.Targets = append(v.Targets, pub(p, r.IntN(2) == 0))
		}
	}
	return v
}

// A pass that plans only what was marked plans as a full pass does, on
// random histories of what marks volumes in the agent: manifests edited
// and reread, CSI entries set and removed, records changed (as every
// operation and drift correction changes them, through State), the
// network hold taken and let go. Its records are the state's, its
// steps Plan's and its PendingChange conditions PendingChanges'.
func TestIncrementalPassPlansAsAFullPass(t *testing.T) {
	r := rand.New(rand.NewPCG(propSeed(t), 2))
	all := slices.Concat(propManifests, propCSI)
	for history := range 60 {
		m := &manifestsAt{vols: map[string]*manifest.VolumeSpec{}}
		a := New(Config{StateDir: t.TempDir(), Store: memStore{}, Manifests: m, NetworkDrivers: []string{"net"}})
		a.state = a.newState()
		close(a.startedc)
		ctx := context.Background()
		for step := range 25 {
			var did []string
			for range 1 + r.IntN(3) {
				did = append(did, a.randomEvent(r, m, all))
			}
			a.growth.take() // sizes are not this test's: none is read
			p := a.plan(ctx, a.cfg.Now())
			actual := a.state.Snapshot()
			full := decide.Decide(p.desired, actual, decide.Observations{})
			where := "history " + strconv.Itoa(history) + " step " + strconv.Itoa(step) + " after " + strconv.Quote(did[len(did)-1])
			if !reflect.DeepEqual(a.view.actual, actual) {
				t.Fatalf("%s: the pass's records differ from the state's", where)
			}
			if got := a.view.planner.Plan(); len(got)+len(full.Ops) > 0 && !reflect.DeepEqual(got, full.Ops) {
				t.Fatalf("%s: incremental plan %+v, full %+v (planned %v)", where, got, full.Ops, p.planned)
			}
			for _, op := range full.Ops {
				if slices.Contains(p.planned, op.Volume) != slices.Contains(p.dec.Ops, op) {
					t.Fatalf("%s: %+v is not among the operations of a volume planned", where, op)
				}
			}
			for n := range p.desired {
				if want, has := len(full.Pending[n]) > 0, a.conds.Has(n, CondPendingChange); want != has {
					t.Fatalf("%s: %s PendingChange %v, full pass %v", where, n, has, want)
				}
			}
		}
	}
}

// randomEvent makes one change the agent hears of as it would running.
func (a *Agent) randomEvent(r *rand.Rand, m *manifestsAt, all []string) string {
	switch r.IntN(5) {
	case 0:
		n := propManifests[r.IntN(len(propManifests))]
		if r.IntN(4) == 0 {
			delete(m.vols, n)
		} else {
			m.vols[n] = randSpec(r, all)
		}
		a.loadManifests()
		return "manifest " + n
	case 1:
		n := propCSI[r.IntN(len(propCSI))]
		if r.IntN(3) == 0 {
			a.RemoveDesired(n)
			return "csi remove " + n
		}
		spec := randSpec(r, all)
		var ts []DesiredTarget
		for _, t := range spec.Mounts {
			ts = append(ts, DesiredTarget{Path: t.Path, ReadOnly: t.ReadOnly, NestedIn: t.NestedIn})
		}
		a.SetDesired(NewDesired(n, "csi:"+n, spec, false, ts))
		return "csi set " + n
	case 2:
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // ShutdownNetwork holds, then returns without waiting
		if r.IntN(2) == 0 {
			a.ShutdownNetwork(ctx)
			return "network hold"
		}
		a.ResumeNetwork()
		return "network resume"
	default:
		n := all[r.IntN(len(all))]
		if r.IntN(4) == 0 {
			_ = a.state.Forget(n)
			return "record forgotten " + n
		}
		_ = a.state.Adopt(randRec(r, n))
		return "record changed " + n
	}
}

// A volume whose operation failed is planned again, and its operation
// offered again, when its backoff ends, with nothing else marking it;
// not before.
func TestBackoffEndMarksTheVolume(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &manifestsAt{vols: map[string]*manifest.VolumeSpec{"a": {Source: manifest.Source{Kind: "loop"}, Filesystem: &manifest.Filesystem{Type: "ext4"}}}}
	a := New(Config{StateDir: t.TempDir(), Store: memStore{}, Manifests: m, Now: func() time.Time { return now }})
	a.state = a.newState()
	close(a.startedc)
	ctx := context.Background()
	a.loadManifests()
	if p := a.plan(ctx, now); len(p.dec.Ops) != 1 || p.dec.Ops[0].Name != OpAttach {
		t.Fatalf("first pass %+v, want an attach of a", p.dec.Ops)
	}
	a.exec.Start(ctx, "a", OpAttach, func(context.Context) error { return errors.New("no such file") }, nil)
	a.exec.Wait()
	if p := a.plan(ctx, now.Add(initialBackoff/2)); len(p.planned) != 0 {
		t.Fatalf("a pass during the backoff planned %v, want nothing", p.planned)
	}
	p := a.plan(ctx, now.Add(initialBackoff))
	if !slices.Equal(p.planned, []string{"a"}) || len(p.dec.Ops) != 1 || p.dec.Ops[0].Name != OpAttach {
		t.Fatalf("the pass at the backoff's end planned %v with %+v, want a's attach again", p.planned, p.dec.Ops)
	}
	if p := a.plan(ctx, now.Add(2*initialBackoff)); len(p.planned) != 0 {
		t.Fatalf("a later pass planned %v again, want nothing", p.planned)
	}
}
