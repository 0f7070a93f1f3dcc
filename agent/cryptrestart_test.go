package agent

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/decide"
	"github.com/volumed/volumed/store"
)

// Start-up adopts an open mapping of ours without reopening it; one that
// is gone (a reboot) is opened again by the next pass.
func TestReconstructAdoptsMapping(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k")
	if err := a.opAttach(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	rec := a.state.Get("a")
	v := &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, rec.Mapping.UUID)
	if v.Mapping == nil || *v.Mapping != *rec.Mapping {
		t.Fatalf("adopted %+v, want the record's %+v", v.Mapping, rec.Mapping)
	}
	if f.opens != 1 {
		t.Errorf("%d opens, want 1: adoption reopened", f.opens)
	}
	// A mapping of another header than the one recorded is not adopted.
	v = &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, "another-uuid")
	if v.Mapping != nil {
		t.Errorf("a mapping of another LUKS2 volume was adopted: %+v", v.Mapping)
	}
	// The UUID an uncertain open was opening counts when no record says.
	intents := []store.Intent{{Volume: "a", Op: OpOpen, Inputs: map[string]string{"uuid": "u-open"}}}
	if got := mappingUUID("a", &store.Volume{Name: "a"}, intents); got != "u-open" {
		t.Errorf("mappingUUID from an open intent = %q, want u-open", got)
	}
	if got := mappingUUID("a", rec, intents); got != rec.Mapping.UUID {
		t.Errorf("mappingUUID with a record = %q, want the record's %q", got, rec.Mapping.UUID)
	}
	f.Close(ctx, "volumed-a")
	v = &store.Volume{Name: "a", Attachment: rec.Attachment}
	a.adoptMapping(ctx, "a", v, rec, rec.Mapping.UUID)
	if v.Mapping != nil {
		t.Errorf("a closed mapping was adopted: %+v", v.Mapping)
	}
	if ops := decide.Plan(map[string]*Desired{"a": d}, map[string]*store.Volume{"a": v}); len(ops) != 1 || ops[0].Name != OpOpen {
		t.Errorf("after a reboot the plan is %+v, want open", ops)
	}
}

// An encrypt cut short by a crash is redone with the UUID its intent
// recorded, over its own torn header; a torn header of another UUID is
// never written over.
func TestInterruptedEncryptIsRedoneWithItsUUID(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		torn      string // the UUID of the torn header on the device
		wantUUID  string
		wantError string
	}{
		{"its own torn header", "u-intent", "u-intent", ""},
		{"another torn header", "u-other", "u-other", "damaged or torn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, f := cryptAgent(t)
			d := encrypted(netVolume("a"), "/etc/k")
			if err := a.opAttach(ctx, d); err != nil {
				t.Fatal(err)
			}
			f.headers["/dev/fake-a"] = fakeHeader{uuid: c.torn, torn: true}
			a.formats.encrypting.set("a", "u-intent") // as reconstruct does from the intent
			err := a.opOpen(ctx, d)
			if c.wantError == "" && err != nil || c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)) {
				t.Fatalf("open: %v, want %q", err, c.wantError)
			}
			if h := f.headers["/dev/fake-a"]; h.uuid != c.wantUUID {
				t.Errorf("header UUID %q, want %q", h.uuid, c.wantUUID)
			}
			if c.wantError != "" && f.formats != 0 {
				t.Errorf("%d formats over another volume's torn header", f.formats)
			}
		})
	}
}

// verifyingTarget is a fakeTarget whose attachments verify at the device
// they were recorded with.
type verifyingTarget struct{ fakeTarget }

func (*verifyingTarget) Verify(_ context.Context, at store.Attachment) (string, bool, error) {
	return at.Device, true, nil
}

// Start-up: an open mapping of a volume's record is adopted with the key
// kind the record kept, nothing opened; a mapping that is gone leaves the
// volume to be opened; an encrypt left uncertain is remembered with its
// UUID for the open that redoes it.
func TestReconstructEncrypted(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	a.cfg.Attachers = map[string]Attacher{"fake": &verifyingTarget{}}
	st := a.cfg.Store
	at := func(name string) *store.Attachment {
		return &store.Attachment{Kind: "fake", Device: "/dev/fake-" + name, Identity: "fake:" + name, Owned: true}
	}
	open := &store.Volume{Name: "open", Kind: "fake", Attachment: at("open"),
		Mapping: &store.Mapping{Name: "volumed-open", UUID: "u-open", Device: "/dev/mapper/volumed-open", KeyKind: "file"}}
	rebooted := &store.Volume{Name: "rebooted", Kind: "fake", Attachment: at("rebooted"),
		Mapping: &store.Mapping{Name: "volumed-rebooted", UUID: "u-reb", Device: "/dev/mapper/volumed-rebooted", KeyKind: "file"}}
	encrypting := &store.Volume{Name: "encrypting", Kind: "fake", Attachment: at("encrypting")}
	for _, v := range []*store.Volume{open, rebooted, encrypting} {
		if err := st.Put(v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Begin(store.Intent{Volume: "encrypting", Op: OpEncrypt, Inputs: map[string]string{"uuid": "u-intent"}}); err != nil {
		t.Fatal(err)
	}
	f.headers["/dev/fake-open"] = fakeHeader{uuid: "u-open", keys: []string{"/k"}}
	f.headers["/dev/fake-rebooted"] = fakeHeader{uuid: "u-reb", keys: []string{"/k"}}
	f.open["volumed-open"] = "/dev/fake-open"
	desired := map[string]*Desired{}
	for _, n := range []string{"open", "rebooted", "encrypting"} {
		desired[n] = encrypted(netVolume(n), "/k")
	}
	a.manifests.replace(desired, nil)
	if err := a.reconstruct(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.state.Get("open").Mapping; got == nil || *got != *open.Mapping {
		t.Errorf("open's mapping %+v, want the record's %+v adopted", got, open.Mapping)
	}
	if got := a.state.Get("rebooted").Mapping; got != nil {
		t.Errorf("rebooted's mapping is gone from the kernel but recorded: %+v", got)
	}
	if uuid, ok := a.formats.encrypting.of("encrypting"); !ok || uuid != "u-intent" {
		t.Errorf("interrupted encrypt remembered as %q, %v; want u-intent", uuid, ok)
	}
	if f.opens != 0 {
		t.Errorf("%d opens at start-up, want none", f.opens)
	}
	ops := decide.Plan(desired, a.state.Snapshot())
	want := []Op{{Volume: "encrypting", Name: OpOpen}, {Volume: "open", Name: OpMountDevice}, {Volume: "rebooted", Name: OpOpen}}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("plan after start-up %+v, want %+v", ops, want)
	}
}
