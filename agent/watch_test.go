package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/store"
)

func TestPartitionOf(t *testing.T) {
	for _, c := range []struct {
		part, disk string
		want       bool
	}{
		{"vdc1", "vdc", true},
		{"sdb12", "sdb", true},
		{"nvme0n1p2", "nvme0n1", true},
		{"mmcblk0p1", "mmcblk0", true},
		{"vdc", "vdc", false},          // the disk itself
		{"sdaa1", "sda", false},        // another disk's partition
		{"nvme0n11", "nvme0n1", false}, // no "p" after a digit
		{"nvme0n1p", "nvme0n1", false},
		{"loop0p1", "", false},
	} {
		if got := partitionOf(c.part, c.disk); got != c.want {
			t.Errorf("partitionOf(%q, %q) = %v, want %v", c.part, c.disk, got, c.want)
		}
	}
}

// refreshingTarget is a fakeTarget whose devices can change size: it
// counts the Refresh calls by device.
type refreshingTarget struct {
	*fakeTarget
	refreshed []string
}

func (r *refreshingTarget) Refresh(_ context.Context, at store.Attachment) error {
	r.refreshed = append(r.refreshed, at.Device)
	return nil
}

// A disk's change uevent names the disk, which no volume holds: a staged
// volume on one of its partitions is refreshed (its table rewritten) and
// its growth checked, and a pass is due; a volume on another disk is left
// alone.
func TestWakeOnDiskChangeRefreshesItsPartitions(t *testing.T) {
	r := &refreshingTarget{fakeTarget: &fakeTarget{}}
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Attachers = map[string]Attacher{"fake": r}
	staged := func(name, dev string) *store.Volume {
		return &store.Volume{Name: name, Kind: "fake",
			Attachment: &store.Attachment{Kind: "fake", Device: dev, Identity: "fake:" + name},
			Staging:    &store.MountRecord{Path: "/s/" + name, Owned: true}}
	}
	a.state = NewState(a.cfg.Store, time.Now, map[string]*store.Volume{
		"p": staged("p", "/dev/vdc1"), "q": staged("q", "/dev/vdd1")})
	if !a.wake(context.Background(), Wake{Reason: "disk change", Grow: true, Device: "vdc"}) {
		t.Fatal("a change of the disk under a volume's partition did not ask for a pass")
	}
	if !slices.Equal(r.refreshed, []string{"/dev/vdc1"}) {
		t.Fatalf("refreshed %v, want only the partition on vdc", r.refreshed)
	}
	all, devices, _ := a.growth.take()
	if all || !devices["vdc1"] || devices["vdd1"] {
		t.Fatalf("growth check asked for all=%v devices=%v, want vdc1 alone", all, devices)
	}
}

// joiningTarget is a fakeTarget whose source takes new disks in
// (Joiner), like an LV in a VG volumed keeps with grow: true.
type joiningTarget struct{ *fakeTarget }

func (joiningTarget) Joinable(context.Context, *Desired, store.Attachment) (bool, error) {
	return true, nil
}

// A block device that appears while a volume is Ready asks a growth
// check of each wanted volume whose source takes disks in (its VG may
// grow onto it now, not at the next resync), converged or not, and a
// pass; the volumes of other drivers are not checked.
func TestWakeOnDiskAddAsksJoiners(t *testing.T) {
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Attachers = map[string]Attacher{"fake": joiningTarget{&fakeTarget{}}, "other": &fakeTarget{}}
	ready := &Desired{Name: "lv", Kind: "fake", Spec: &manifest.VolumeSpec{}}
	a.SetDesired(ready)
	a.SetDesired(&Desired{Name: "img", Kind: "other", Spec: &manifest.VolumeSpec{}})
	a.state = NewState(a.cfg.Store, time.Now, map[string]*store.Volume{"lv": {Name: "lv", Kind: "fake",
		Attachment: &store.Attachment{Kind: "fake", Device: "/dev/dm-0", Identity: "fake:lv"},
		Staging:    &store.MountRecord{Path: "/s/lv", Owned: true}}})
	a.growth.take() // what setting the manifests asked
	if !a.wake(context.Background(), Wake{Reason: "block device added: vdd", Drivers: []string{"fake", "other"}, Added: true}) {
		t.Fatal("a disk added under a Ready volume whose VG takes new disks did not ask for a pass")
	}
	all, _, volumes := a.growth.take()
	if all || !volumes["lv"] || volumes["img"] {
		t.Fatalf("growth check asked for all=%v volumes=%v, want lv alone", all, volumes)
	}

	// With the event's facts: only a device that may be a new disk asks
	// (each check runs lvm2 over every disk), not volumed's own, an LV,
	// a held or an empty one.
	for _, c := range []struct {
		name string
		ev   DeviceEvent
		want bool
	}{
		{"a disk hot-added", DeviceEvent{Action: "add", Name: "sdd", Keys: []string{"device:path:/dev/sdd"}}, true},
		{"a loop device bound by the operator", DeviceEvent{Action: "change", Name: "loop5", Keys: []string{"device:path:/dev/loop5"}}, true},
		{"an LV activated", DeviceEvent{Action: "change", Name: "dm-3", VG: "vg0"}, false},
		{"a dm device made, no table yet", DeviceEvent{Action: "add", Name: "dm-4", Empty: true}, false},
		{"a PV its LVs hold", DeviceEvent{Action: "change", Name: "vdb", Held: true}, false},
		{"volumed's own LUKS mapping", DeviceEvent{Action: "change", Name: "dm-5", Ours: true}, false},
	} {
		a.growth.take()
		a.wake(context.Background(), Wake{Reason: c.name, Drivers: []string{"fake", "other"}, Added: c.ev.Action == "add", Facts: func() *DeviceEvent { return &c.ev }})
		if _, _, volumes := a.growth.take(); volumes["lv"] != c.want {
			t.Errorf("%s: join check asked %v, want %v", c.name, volumes["lv"], c.want)
		}
	}
}

// waitingSource is a source whose disk never comes: its Attach waits,
// stating what for (nil: unstated).
type waitingSource struct {
	*fakeTarget
	awaits *Awaited
}

func (w waitingSource) Find(context.Context, *Desired) ([]Found, error) { return nil, nil }

func (w waitingSource) Attach(context.Context, *Desired) (Found, error) {
	err := errors.New("waiting for the disk")
	if w.awaits == nil {
		return Found{}, err
	}
	return Found{}, &Waiting{For: *w.awaits, Err: err}
}

// A volume whose attach said what it waits for retries at the event of
// that device alone: devices that come and go meanwhile (a loop device
// bound, an LV activated, volumed's own devices) leave it to its
// backoff, where before each one retried it. A volume whose wait says
// nothing retries at each device added, as before.
func TestWakeRetriesOnlyWhatTheEventMayBring(t *testing.T) {
	ctx := context.Background()
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Attachers = map[string]Attacher{
		"serial": waitingSource{fakeTarget: &fakeTarget{}, awaits: &Awaited{Keys: []string{"device:serial:S1"}}},
		"vague":  waitingSource{fakeTarget: &fakeTarget{}},
	}
	for _, n := range []string{"serial", "vague"} {
		d := &Desired{Name: n, Kind: n, Spec: &manifest.VolumeSpec{}}
		a.SetDesired(d)
		if err := a.opAttach(ctx, d); err == nil {
			t.Fatalf("%s attached a disk that is not there", n)
		}
	}
	drivers := []string{"serial", "vague"}
	retried := func(ev DeviceEvent) []string {
		a.dirty.take()
		a.wake(ctx, Wake{Reason: "block device: " + ev.Name, Drivers: drivers, Added: ev.Action == "add", Facts: func() *DeviceEvent { return &ev }})
		_, names := a.dirty.take()
		slices.Sort(names)
		return names
	}
	for _, c := range []struct {
		name string
		ev   DeviceEvent
		want []string
	}{
		{"a loop device bound", DeviceEvent{Action: "change", Name: "loop3", Keys: []string{"device:path:/dev/loop3"}}, nil},
		{"a loop device made", DeviceEvent{Action: "add", Name: "loop4", Keys: []string{"device:path:/dev/loop4"}, Empty: true}, []string{"vague"}},
		{"an LV activated", DeviceEvent{Action: "change", Name: "dm-1", Keys: []string{"device:path:/dev/dm-1"}, VG: "vg0"}, nil},
		{"another disk", DeviceEvent{Action: "add", Name: "sdc", Keys: []string{"device:path:/dev/sdc", "device:serial:S2"}}, []string{"vague"}},
		{"the disk", DeviceEvent{Action: "add", Name: "sdb", Keys: []string{"device:path:/dev/sdb", "device:serial:S1"}}, []string{"serial", "vague"}},
	} {
		if got := retried(c.ev); !slices.Equal(got, c.want) {
			t.Errorf("%s: retried %v, want %v", c.name, got, c.want)
		}
	}
}
