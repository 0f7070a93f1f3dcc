package main

import (
	"io"
	"strings"
	"testing"
)

func TestLoopPoolNeedsTheCSIEndpoint(t *testing.T) {
	if _, err := parseRunFlags([]string{"--csi-loop-pool", "/srv/pool"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--csi-endpoint") {
		t.Errorf("a pool without the CSI endpoint: %v, want an error naming --csi-endpoint", err)
	}
	f, err := parseRunFlags([]string{"--csi-endpoint", "unix:///run/csi.sock", "--csi-loop-pool", "/srv/pool"}, io.Discard)
	if err != nil || f.loopPool != "/srv/pool" || f.loopReserve != "1Gi" {
		t.Errorf("flags: %+v, %v", f, err)
	}
}

func TestLVMGroupsFlag(t *testing.T) {
	if _, err := parseRunFlags([]string{"--csi-lvm-volume-groups", "vg0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--csi-endpoint") {
		t.Errorf("volume groups without the CSI endpoint: %v, want an error naming --csi-endpoint", err)
	}
	if _, err := parseRunFlags([]string{"--csi-endpoint", "unix:///run/csi.sock", "--csi-lvm-volume-groups", "vg0,-bad"}, io.Discard); err == nil || !strings.Contains(err.Error(), `"-bad"`) {
		t.Errorf("a bad VG name: %v, want an error naming it", err)
	}
	f, err := parseRunFlags([]string{"--csi-endpoint", "unix:///run/csi.sock", "--csi-lvm-volume-groups", "vg0, vgdata"}, io.Discard)
	if err != nil || strings.Join(f.groups(), "|") != "vg0|vgdata" {
		t.Errorf("flags: %v, %v", f.groups(), err)
	}
}

// volumed-wait@.service tests /run/volumed/ready/NAME: the agent on the
// default socket keeps its marks there; one on a socket of its own keeps
// none unless told where (it would empty the host's, or whatever sits
// beside its socket).
func TestReadyDir(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "/run/volumed/ready"},
		{[]string{"--socket", "/tmp/t1/volumed.sock"}, ""},
		{[]string{"--socket", "/run/volumed.sock"}, ""},
		{[]string{"--socket", "/tmp/t1/volumed.sock", "--ready-dir", "/tmp/t1/ready"}, "/tmp/t1/ready"},
		{[]string{"--ready-dir", "/srv/marks"}, "/srv/marks"},
	} {
		f, err := parseRunFlags(c.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.marks(); got != c.want {
			t.Errorf("%q: ready dir %q, want %q", c.args, got, c.want)
		}
	}
}
