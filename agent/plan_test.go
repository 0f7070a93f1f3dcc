package agent

import (
	"reflect"
	"testing"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

func want(name string, targets ...DesiredTarget) *Desired {
	return &Desired{Name: name, Driver: "loop", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4"}}, Targets: targets}
}

func tgt(p string, ro bool) DesiredTarget { return DesiredTarget{Path: p, ReadOnly: ro} }

func have(name string, attached, staged bool, targets ...store.MountRecord) *store.Volume {
	v := &store.Volume{Name: name, Driver: "loop", Targets: targets}
	if attached {
		v.Attachment = &store.Attachment{Driver: "loop", Device: "/dev/loop1", Identity: "loop:/i@1:2", Owned: true}
	}
	if staged {
		v.Staging = &store.MountRecord{Path: "/s/" + name, Owned: true, Options: []string{"nosuid", "nodev"}}
	}
	return v
}

func pub(p string, ro bool) store.MountRecord {
	return store.MountRecord{Path: p, ReadOnly: ro, Owned: true, Options: bindWords(BindOptions{ReadOnly: ro, NoSuid: true, NoDev: true})}
}

func TestPlan(t *testing.T) {
	raw := &Desired{Name: "r", Driver: "loop", Spec: &manifest.VolumeSpec{}, Block: true, Targets: []DesiredTarget{{Path: "/dev-t", Block: true}}}
	rawPub := store.MountRecord{Path: "/dev-t", Owned: true, Options: bindWords(bindOptions(raw, raw.Targets[0]))}
	absent := want("a", tgt("/t", false))
	absent.Absent = true
	pinned := have("boot", true, true, pub("/boot-data", false))
	pinned.Attachment.Pinned, pinned.Attachment.Owned = true, false
	nested := DesiredTarget{Path: "/srv/data/logs", NestedIn: "outer"}
	cases := []struct {
		name    string
		desired map[string]*Desired
		actual  map[string]*store.Volume
		want    []Op
	}{
		{"nothing", nil, nil, nil},
		{"new volume attaches first",
			map[string]*Desired{"a": want("a", tgt("/t", false))}, nil,
			[]Op{{Volume: "a", Kind: OpAttach}}},
		{"attached volume mounts its device",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*store.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Kind: OpMountDevice}}},
		{"staged volume publishes its targets in path order",
			map[string]*Desired{"a": want("a", tgt("/t1", false), tgt("/t2", true))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/t1", false))},
			[]Op{{Volume: "a", Kind: OpPublish, Target: tgt("/t2", true)}}},
		{"a raw block volume is published once attached, never staged",
			map[string]*Desired{"r": raw},
			map[string]*store.Volume{"r": have("r", true, false)},
			[]Op{{Volume: "r", Kind: OpPublish, Target: raw.Targets[0]}}},
		{"a published raw block volume needs nothing",
			map[string]*Desired{"r": raw},
			map[string]*store.Volume{"r": have("r", true, false, rawPub)},
			nil},
		{"converged volume needs nothing",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/t", false))},
			nil},
		{"target no longer wanted is unpublished before anything else",
			map[string]*Desired{"a": want("a")},
			map[string]*store.Volume{"a": have("a", true, true, pub("/old", false))},
			[]Op{{Volume: "a", Kind: OpUnpublish, Target: DesiredTarget{Path: "/old"}}}},
		{"read-only flip is remounted in place, not republished",
			map[string]*Desired{"a": want("a", tgt("/t", true))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/t", false))},
			[]Op{{Volume: "a", Kind: OpRemount, Target: tgt("/t", true)}}},
		{"and back to read-write, in place too",
			map[string]*Desired{"a": want("a", tgt("/t", false))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/t", true))},
			[]Op{{Volume: "a", Kind: OpRemount, Target: tgt("/t", false)}}},
		{"converged read-only target needs nothing",
			map[string]*Desired{"a": want("a", tgt("/t", true))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/t", true))},
			nil},
		{"removed volume: unpublish, then unmount, then detach",
			nil,
			map[string]*store.Volume{"a": have("a", true, true, pub("/t", false)), "b": have("b", true, true), "c": have("c", true, false)},
			[]Op{{Volume: "a", Kind: OpUnpublish, Target: DesiredTarget{Path: "/t"}}, {Volume: "b", Kind: OpUnmountDevice}, {Volume: "c", Kind: OpDetach}}},
		{"state absent tears down like removal",
			map[string]*Desired{"a": absent},
			map[string]*store.Volume{"a": have("a", true, false)},
			[]Op{{Volume: "a", Kind: OpDetach}}},
		{"stages: unpublish before setup before teardown",
			map[string]*Desired{"new": want("new"), "moved": want("moved")},
			map[string]*store.Volume{"gone": have("gone", true, false), "moved": have("moved", true, true, pub("/x", false))},
			[]Op{{Volume: "moved", Kind: OpUnpublish, Target: DesiredTarget{Path: "/x"}}, {Volume: "new", Kind: OpAttach}, {Volume: "gone", Kind: OpDetach}}},
		{"publish waits while another volume still holds the path",
			map[string]*Desired{"a": want("a"), "b": want("b", tgt("/x", false))},
			map[string]*store.Volume{"a": have("a", true, true, pub("/x", false)), "b": have("b", true, true)},
			[]Op{{Volume: "a", Kind: OpUnpublish, Target: DesiredTarget{Path: "/x"}}}},
		{"a pinned volume is never torn down",
			nil, map[string]*store.Volume{"boot": pinned}, nil},
		{"a nested target waits for the target it is in",
			map[string]*Desired{"outer": want("outer", tgt("/srv/data", false)), "inner": want("inner", nested)},
			map[string]*store.Volume{"outer": have("outer", true, true), "inner": have("inner", true, true)},
			[]Op{{Volume: "outer", Kind: OpPublish, Target: tgt("/srv/data", false)}}},
		{"a nested target is published once the outer one is",
			map[string]*Desired{"outer": want("outer", tgt("/srv/data", false)), "inner": want("inner", nested)},
			map[string]*store.Volume{"outer": have("outer", true, true, pub("/srv/data", false)), "inner": have("inner", true, true)},
			[]Op{{Volume: "inner", Kind: OpPublish, Target: nested}}},
		{"the outer target is unpublished only after the nested one",
			nil,
			map[string]*store.Volume{"outer": have("outer", true, true, pub("/srv/data", false)), "inner": have("inner", true, true, pub("/srv/data/logs", false))},
			[]Op{{Volume: "inner", Kind: OpUnpublish, Target: DesiredTarget{Path: "/srv/data/logs"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(c.desired, c.actual)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Plan:\n got  %+v\n want %+v", got, c.want)
			}
		})
	}
}

func TestDecideFormat(t *testing.T) {
	ext4 := &manifest.Filesystem{Type: "ext4", Format: manifest.FormatIfBlank}
	never := &manifest.Filesystem{Type: "ext4", Format: manifest.FormatNever}
	cases := []struct {
		name    string
		sigs    []Signature
		fs      *manifest.Filesystem
		ro      bool
		format  bool
		wantErr string
	}{
		{"blank is formatted", nil, ext4, false, true, ""},
		{"blank with format never is refused", nil, never, false, false, "is blank and filesystem.format is never"},
		{"blank read-only source", nil, ext4, true, false, "is blank and the source is read-only: cannot format"},
		{"same filesystem is mounted", []Signature{{Type: "ext4", Usage: "filesystem"}}, ext4, false, false, ""},
		{"ext3 mounts as ext4", []Signature{{Type: "ext3", Usage: "filesystem"}}, ext4, false, false, ""},
		{"foreign filesystem is never reformatted", []Signature{{Type: "xfs", Usage: "filesystem"}}, ext4, false, false,
			"holds an existing xfs filesystem but the manifest wants ext4: not reformatted"},
		{"partition table refused", []Signature{{Type: "gpt", Usage: "partition_table", Offset: 512}}, ext4, false, false,
			"carries a gpt signature (partition_table, at byte 512): volumed never formats or mounts over it"},
		{"luks refused", []Signature{{Type: "crypto_LUKS", Usage: "crypto"}}, ext4, false, false,
			"carries a crypto_LUKS signature (crypto, at byte 0): volumed never formats or mounts over it"},
		{"two filesystems refused", []Signature{{Type: "ext4", Usage: "filesystem"}, {Type: "xfs", Usage: "filesystem"}}, ext4, false, false,
			"carries several filesystem signatures (ext4, xfs): refusing to guess"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decideFormat(c.sigs, c.fs, c.ro)
			if got != c.format {
				t.Errorf("format = %v, want %v", got, c.format)
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != c.wantErr {
				t.Errorf("error = %q, want %q", gotErr, c.wantErr)
			}
		})
	}
}

// A publish planned from a snapshot older than the publish that already
// recorded the target is a no-op: the record keeps one entry per path
// (a twin made a later pass see a stale copy and act on it forever).
func TestPublishOfRecordedTargetIsNoOp(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	if err := a.state.Adopt(have("a", true, true, pub("/t", false))); err != nil {
		t.Fatal(err)
	}
	// a.cfg.Mounter is nil: any mount call would panic.
	if err := a.opPublish(want("a", tgt("/t", false)), tgt("/t", false)); err != nil {
		t.Fatal(err)
	}
	if n := len(a.state.Get("a").Targets); n != 1 {
		t.Errorf("%d target records for one path, want 1", n)
	}
}
