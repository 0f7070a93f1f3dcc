package lvm

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// label is what pvcreate writes in the second sector: LABELONE, its
// sector, a CRC (not checked), the PV header's offset, the type, and the
// PV header whose first 32 bytes are the UUID.
func label(sector int, uuid string) []byte {
	b := make([]byte, 4*512)
	l := b[sector*512:]
	copy(l, "LABELONE")
	binary.LittleEndian.PutUint64(l[8:], uint64(sector))
	binary.LittleEndian.PutUint32(l[20:], 32)
	copy(l[24:], "LVM2 001")
	copy(l[32:], strings.ReplaceAll(uuid, "-", ""))
	return b
}

func TestParseLabel(t *testing.T) {
	u := PVUUID("vg0", "device:serial:A")
	moved := label(1, u)
	binary.LittleEndian.PutUint64(moved[512+8:], 3) // names another sector
	bad := label(1, u)
	bad[512+40] = '?'
	far := label(1, u)
	binary.LittleEndian.PutUint32(far[512+20:], 500)
	tests := []struct {
		name string
		b    []byte
		want string
		err  bool
	}{
		{"sector 1, as pvcreate writes it", label(1, u), u, false},
		{"sector 0", label(0, u), u, false},
		{"zeros", make([]byte, 2048), "", false},
		{"short", label(1, u)[:520], "", false},
		{"a label copied from another sector", moved, "", false},
		{"a UUID with a character lvm2 never writes", bad, "", true},
		{"a header outside the sector", far, "", true},
	}
	for _, tc := range tests {
		got, err := ParseLabel(tc.b)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: ParseLabel = %q, %v; want %q, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestReadLabel(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk")
	u := PVUUID("vg0", "device:serial:A")
	if err := os.WriteFile(p, append(label(1, u), make([]byte, 1<<20)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadLabel(p); got != u || err != nil {
		t.Errorf("ReadLabel = %q, %v; want %q", got, err, u)
	}
}

func FuzzParseLabel(f *testing.F) {
	f.Add(label(1, PVUUID("vg0", "a")))
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseLabel(b)
		if err == nil && u != "" && len(u) != 38 {
			t.Fatalf("ParseLabel gave %q", u)
		}
	})
}
