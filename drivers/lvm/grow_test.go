package lvm

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestExtend(t *testing.T) {
	const mi = 1 << 20
	w := Want{Volume: "data", VG: "vg0", Name: "data", Size: 128 * mi}
	ours := LV{VG: "vg0", Name: "data", Tags: []string{"volumed:data"}, Size: 64 * mi}
	foreign := LV{VG: "vg0", Name: "data", Size: 64 * mi}
	others := LV{VG: "vg0", Name: "data", Tags: []string{"volumed:logs"}, Size: 64 * mi}
	big := ours
	big.Size = 256 * mi
	same := ours
	same.Size = 128 * mi
	foreignSame := foreign
	foreignSame.Size = 128 * mi
	for _, c := range []struct {
		name   string
		lv     LV
		extend bool
		says   string
	}{
		{"ours, smaller: extend", ours, true, ""},
		{"ours, as asked: nothing", same, false, ""},
		{"ours, larger: refused, naming both sizes", big, false, "LV vg0/data is 268435456 bytes, the manifest asks for 134217728: volumed never shrinks"},
		{"not volumed's: never extended", foreign, false, "never resizes an LV it did not create"},
		{"another volume's: never extended", others, false, "never resizes an LV it did not create"},
		{"not volumed's, as asked: nothing", foreignSame, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Extend(w, c.lv)
			if got != c.extend || (c.says == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Extend = %v, %v; want %v, saying %q", got, err, c.extend, c.says)
			}
		})
	}
}

func TestGrowRunsLvextendOnlyWhenAsked(t *testing.T) {
	w := Want{Volume: "data", VG: "vg0", Name: "data", Size: 128 << 20}
	f := &fakeLVM{}
	lv := LV{VG: "vg0", Name: "data", Tags: []string{"volumed:data"}, Size: 64 << 20}
	if ok, err := (Tool{Runner: f}).Grow(context.Background(), w, lv); !ok || err != nil {
		t.Fatalf("Grow = %v, %v", ok, err)
	}
	want := [][]string{{"lvextend", "--size", "134217728b", "vg0/data"}}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("ran %q, want %q", f.calls, want)
	}
	lv.Size = w.Size
	f.calls = nil
	if ok, err := (Tool{Runner: f}).Grow(context.Background(), w, lv); ok || err != nil || len(f.calls) != 0 {
		t.Errorf("Grow of an LV as large as asked = %v, %v after %q, want nothing run", ok, err, f.calls)
	}
}

func TestRound(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct{ size, extent, want int64 }{
		{100 * mi, 4 * mi, 100 * mi},
		{101 * mi, 4 * mi, 104 * mi},
		{1, 4 * mi, 4 * mi},
		{100 * mi, 32 * mi, 128 * mi},
		{100 * mi, 0, 100 * mi},
	} {
		if got := Round(c.size, c.extent); got != c.want {
			t.Errorf("Round(%d, %d) = %d, want %d", c.size, c.extent, got, c.want)
		}
	}
}
