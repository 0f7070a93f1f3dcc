package provisioner

import (
	"context"
	"reflect"
	"testing"

	"github.com/volumed/volumed/agent/csi"
	lvmdrv "github.com/volumed/volumed/drivers/lvm"
)

// reports answers vgs and lvs with lvm2 2.03's JSON, as the guest of
// TestLVMThin printed them (this host has no device-mapper).
type reports struct{ calls [][]string }

func (r *reports) Run(_ context.Context, args []string) ([]byte, []byte, error) {
	r.calls = append(r.calls, args)
	switch args[0] {
	case "vgs":
		return []byte(`{"report":[{"vg":[{"vg_name":"vgthin","vg_uuid":"u","vg_size":"532676608","vg_free":"289406976","vg_extent_size":"4194304","vg_missing_pv_count":"0","pv_count":"1"}]}]}`), nil, nil
	case "lvs":
		return []byte(`{"report":[{"lv":[
{"lv_name":"pool","lv_uuid":"p","lv_tags":"","lv_size":"134217728","lv_active":"active","lv_device_open":"1","lv_kernel_major":"253","lv_kernel_minor":"2","segtype":"thin-pool","vg_name":"vgthin","pool_lv":"","data_percent":"27.44","metadata_percent":"12.01"},
{"lv_name":"csi-pvc-a","lv_uuid":"a","lv_tags":"volumed:csi-f4c74b1cc68251af9f6c","lv_size":"50331648","lv_active":"active","lv_device_open":"1","lv_kernel_major":"253","lv_kernel_minor":"6","segtype":"thin","vg_name":"vgthin","pool_lv":"pool","data_percent":"21.09","metadata_percent":""},
{"lv_name":"csi-snap-s1","lv_uuid":"s","lv_tags":"volumed-snap:csi-snap-s1","lv_size":"50331648","lv_active":"","lv_device_open":"","lv_kernel_major":"-1","lv_kernel_minor":"-1","segtype":"thin","vg_name":"vgthin","pool_lv":"pool","data_percent":"","metadata_percent":""}]}]}`), nil, nil
	}
	return nil, nil, nil
}

func TestGroup(t *testing.T) {
	r := &reports{}
	p := Provisioner{Tool: lvmdrv.Tool{Runner: r}}
	g, err := p.Group(context.Background(), "vgthin")
	if err != nil {
		t.Fatal(err)
	}
	want := csi.LVMGroup{Found: true, Free: 289406976, LVs: []csi.LVMVolume{
		{Name: "pool", Size: 134217728, ThinPool: true, DataPercent: 27.44, Open: true},
		{Name: "csi-pvc-a", Size: 50331648, Thin: true, DataPercent: 21.09, Open: true, Owner: "csi-f4c74b1cc68251af9f6c"},
		{Name: "csi-snap-s1", Size: 50331648, Thin: true, DataPercent: -1, Snapshot: "csi-snap-s1"},
	}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("Group:\n%+v\nwant\n%+v", g, want)
	}
	if len(r.calls) != 2 {
		t.Errorf("ran %q: want one vgs and one lvs", r.calls)
	}
	if g, err := p.Group(context.Background(), "vgnone"); err != nil || g.Found {
		t.Errorf("a missing VG: %+v, %v", g, err)
	}
}

func TestTags(t *testing.T) {
	r := &reports{}
	p := Provisioner{Tool: lvmdrv.Tool{Runner: r}}
	// A restore is tagged as its volume's LV, a snapshot as a snapshot.
	if err := p.Snapshot(context.Background(), "vgthin", "csi-snap-s1", "csi-pvc-b", "csi-b"); err != nil {
		t.Fatal(err)
	}
	if err := p.Snapshot(context.Background(), "vgthin", "csi-pvc-a", "csi-snap-s2", ""); err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, c := range r.calls {
		if c[0] == "lvcreate" {
			for i, a := range c {
				if a == "--addtag" {
					tags = append(tags, c[i+1])
				}
			}
		}
	}
	if want := []string{"volumed:csi-b", "volumed-snap:csi-snap-s2"}; !reflect.DeepEqual(tags, want) {
		t.Errorf("tags %q, want %q", tags, want)
	}
}
