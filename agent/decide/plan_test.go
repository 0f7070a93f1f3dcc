package decide

import (
	"reflect"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store/record"
)

// planCase is one table row of Plan: desired and actual state in, the
// operations out.
type planCase struct {
	name    string
	desired map[string]*Desired
	actual  map[string]*record.Volume
	want    []Op
}

func checkPlan(t *testing.T, cases []planCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(c.desired, c.actual)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

// Setting up: attach, mount, publish, remount; nothing for what converged.
func TestPlan(t *testing.T) {
	raw := &Desired{Name: "r", Kind: "loop", Spec: &manifest.VolumeSpec{}, Block: true, Targets: []DesiredTarget{{Path: "/dev-t", Block: true}}}
	rawPub := record.MountRecord{Path: "/dev-t", Owned: true, Options: BindWords(BindOptionsFor(raw, raw.Targets[0]))}
	checkPlan(t, []planCase{
		{"nothing", nil, nil, nil},
		{"new volume attaches first",
			map[string]*Desired{"a": want("a", tgt("/t", false))}, nil,
			[]Op{{Volume: "a", Name: OpAttach}}},
		{"attached volume mounts its device",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*record.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Name: OpMountDevice}}},
		{"staged volume publishes its targets in path order",
			map[string]*Desired{"a": want("a", tgt("/t1", false), tgt("/t2", true))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/t1", false))},
			[]Op{{Volume: "a", Name: OpPublish, Target: tgt("/t2", true)}}},
		{"a raw block volume is published once attached, never staged",
			map[string]*Desired{"r": raw},
			map[string]*record.Volume{"r": have("r", true, false)},
			[]Op{{Volume: "r", Name: OpPublish, Target: raw.Targets[0]}}},
		{"a published raw block volume needs nothing",
			map[string]*Desired{"r": raw},
			map[string]*record.Volume{"r": have("r", true, false, rawPub)},
			nil},
		{"converged volume needs nothing",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/t", false))},
			nil},
		{"target no longer wanted is unpublished before anything else",
			map[string]*Desired{"a": want("a")},
			map[string]*record.Volume{"a": have("a", true, true, pub("/old", false))},
			[]Op{{Volume: "a", Name: OpUnpublish, Target: DesiredTarget{Path: "/old"}}}},
		{"read-only flip is remounted in place, not republished",
			map[string]*Desired{"a": want("a", tgt("/t", true))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/t", false))},
			[]Op{{Volume: "a", Name: OpRemount, Target: tgt("/t", true)}}},
		{"and back to read-write, in place too",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/t", true))},
			[]Op{{Volume: "a", Name: OpRemount, Target: tgt("/t", false)}}},
		{"converged read-only target needs nothing",
			map[string]*Desired{"a": want("a", tgt("/t", true))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/t", true))},
			nil},
	})
}

// Tearing down, and the order among volumes: unpublish before setup
// before teardown, a path's holder before its next, a nested target
// before the one it is in, never what the host booted from.
func TestPlanTeardownAndOrder(t *testing.T) {
	absent := want("a", tgt("/t", false))
	absent.Absent = true
	pinned := have("boot", true, true, pub("/boot-data", false))
	pinned.Attachment.Pinned, pinned.Attachment.Owned = true, false
	nested := DesiredTarget{Path: "/srv/data/logs", NestedIn: "outer"}
	checkPlan(t, []planCase{
		{"removed volume: unpublish, then unmount, then detach",
			nil,
			map[string]*record.Volume{"a": have("a", true, true, pub("/t", false)), "b": have("b", true, true), "c": have("c", true, false)},
			[]Op{{Volume: "a", Name: OpUnpublish, Target: DesiredTarget{Path: "/t"}}, {Volume: "b", Name: OpUnmountDevice}, {Volume: "c", Name: OpDetach}}},
		{"state absent tears down like removal",
			map[string]*Desired{"a": absent},
			map[string]*record.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Name: OpDetach}}},
		{"stages: unpublish before setup before teardown",
			map[string]*Desired{"new": want("new"), "moved": want("moved")},
			map[string]*record.Volume{"gone": have("gone", true, false), "moved": have("moved", true, true, pub("/x", false))},
			[]Op{{Volume: "moved", Name: OpUnpublish, Target: DesiredTarget{Path: "/x"}}, {Volume: "new", Name: OpAttach}, {Volume: "gone", Name: OpDetach}}},
		{"publish waits while another volume still holds the path",
			map[string]*Desired{"a": want("a"), "b": want("b", tgt("/x", false))},
			map[string]*record.Volume{"a": have("a", true, true, pub("/x", false)), "b": have("b", true, true)},
			[]Op{{Volume: "a", Name: OpUnpublish, Target: DesiredTarget{Path: "/x"}}}},
		{"a pinned volume is never torn down",
			nil, map[string]*record.Volume{"boot": pinned}, nil},
		{"a nested target waits for the target it is in",
			map[string]*Desired{"outer": want("outer", tgt("/srv/data", false)), "inner": want("inner", nested)},
			map[string]*record.Volume{"outer": have("outer", true, true), "inner": have("inner", true, true)},
			[]Op{{Volume: "outer", Name: OpPublish, Target: tgt("/srv/data", false)}}},
		{"a nested target is published once the outer one is",
			map[string]*Desired{"outer": want("outer", tgt("/srv/data", false)), "inner": want("inner", nested)},
			map[string]*record.Volume{"outer": have("outer", true, true, pub("/srv/data", false)), "inner": have("inner", true, true)},
			[]Op{{Volume: "inner", Name: OpPublish, Target: nested}}},
		{"the outer target is unpublished only after the nested one",
			nil,
			map[string]*record.Volume{"outer": have("outer", true, true, pub("/srv/data", false)), "inner": have("inner", true, true, pub("/srv/data/logs", false))},
			[]Op{{Volume: "inner", Name: OpUnpublish, Target: DesiredTarget{Path: "/srv/data/logs"}}}},
	})
}

func TestPlanEncrypted(t *testing.T) {
	enc := encrypted(want("a", tgt("/t", false)), "/k")
	gone := mapped(have("a", true, false))
	rawEnc := &Desired{Name: "a", Kind: "loop", Block: true, Targets: []DesiredTarget{{Path: "/dev-t", Block: true}},
		Spec: &manifest.VolumeSpec{Encryption: &manifest.Encryption{LUKS2: &manifest.LUKS2{Keys: []manifest.LUKS2Key{{File: "/k"}}}}}}
	cases := []struct {
		name    string
		desired map[string]*Desired
		actual  map[string]*record.Volume
		want    []Op
	}{
		{"attached: open before mount_device",
			map[string]*Desired{"a": enc}, map[string]*record.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Name: OpOpen}}},
		{"open: mount_device",
			map[string]*Desired{"a": enc}, map[string]*record.Volume{"a": mapped(have("a", true, false))},
			[]Op{{Volume: "a", Name: OpMountDevice}}},
		{"not attached: attach first",
			map[string]*Desired{"a": enc}, nil,
			[]Op{{Volume: "a", Name: OpAttach}}},
		{"converged encrypted volume needs nothing",
			map[string]*Desired{"a": enc}, map[string]*record.Volume{"a": mapped(have("a", true, true, pub("/t", false)))},
			nil},
		{"removed while staged: unmount, no close yet",
			nil, map[string]*record.Volume{"a": mapped(have("a", true, true))},
			[]Op{{Volume: "a", Name: OpUnmountDevice}}},
		{"removed, unmounted: close before detach",
			nil, map[string]*record.Volume{"a": gone},
			[]Op{{Volume: "a", Name: OpClose}}},
		{"removed, closed: detach",
			nil, map[string]*record.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Name: OpDetach}}},
		{"encryption added to a mounted volume: no open over its filesystem",
			map[string]*Desired{"a": enc}, map[string]*record.Volume{"a": have("a", true, true, pub("/t", false))},
			nil},
		{"raw block: open before publish",
			map[string]*Desired{"a": rawEnc}, map[string]*record.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Name: OpOpen}}},
		{"raw block, open: publish the mapping",
			map[string]*Desired{"a": rawEnc}, map[string]*record.Volume{"a": mapped(have("a", true, false))},
			[]Op{{Volume: "a", Name: OpPublish, Target: rawEnc.Targets[0]}}},
		{"encryption added to a published raw block volume: no open under its consumer",
			map[string]*Desired{"a": rawEnc}, map[string]*record.Volume{"a": have("a", true, false, record.MountRecord{Path: "/dev-t", Owned: true, Options: BindWords(BindOptionsFor(rawEnc, rawEnc.Targets[0]))})},
			nil},
		{"close is teardown: after the setup of others",
			map[string]*Desired{"b": want("b")}, map[string]*record.Volume{"a": mapped(have("a", true, false))},
			[]Op{{Volume: "b", Name: OpAttach}, {Volume: "a", Name: OpClose}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Plan(c.desired, c.actual); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan = %+v, want %+v", got, c.want)
			}
		})
	}
}

// One rule (EncryptionChange) says both whether Plan opens and whether
// the change is pending: never both, and one of them for any encryption
// added to a volume with no mapping.
func TestEncryptionOpenedOrPending(t *testing.T) {
	enc := encrypted(want("a", tgt("/t", false)), "/k")
	staged := have("a", true, true)
	targetOnly := have("a", true, false, pub("/t", false))
	for name, rec := range map[string]*record.Volume{"attached": have("a", true, false), "staged": staged, "published, staging gone": targetOnly} {
		open, pending := EncryptionChange(enc, rec)
		if open == (len(pending) > 0) {
			t.Errorf("%s: open %v, pending %v: want exactly one", name, open, pending)
		}
		planned := false
		for _, op := range Plan(map[string]*Desired{"a": enc}, map[string]*record.Volume{"a": rec}) {
			planned = planned || op.Name == OpOpen
		}
		if planned != open {
			t.Errorf("%s: Plan opens %v, EncryptionChange says %v", name, planned, open)
		}
	}
}
