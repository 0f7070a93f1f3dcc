package ostest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// csiDropIn runs the guest's volumed with the CSI service and the lvm
// backend over vgthin (issue 25).
const csiDropIn = `[Service]
ExecStart=
ExecStart=/usr/bin/volumed run --csi-endpoint unix:///run/volumed-csi/csi.sock --node-id ostest --csi-lvm-volume-groups vgthin
`

// addLVMCSI readies m for testdata/lvmcsi.sh, which lvmthin.sh runs: the
// drop-in, the script, and vmcsi (test/vm/vmcsi: the sidecars' and the
// kubelet's calls), built static here (the guest has no Go).
func addLVMCSI(t *testing.T, m *Machine) {
	t.Helper()
	bin := filepath.Join(m.Dir, "vmcsi")
	build := exec.CommandContext(context.Background(), "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/vm/vmcsi")
	build.Dir = m.img.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vmcsi: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "lvmcsi.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddFile("/usr/lib/ostest/vmcsi", 0o755, string(b))
	m.AddFile("/usr/lib/ostest/lvmcsi.sh", 0o644, string(script))
	m.AddFile("/etc/systemd/system/volumed.service.d/csi.conf", 0o644, csiDropIn)
}

// checkLVMCSI checks what lvmcsi.sh saw: the CSI sequence of a thin
// volume of the lvm backend, GetCapacity before and after, a thin
// snapshot restored, a linear volume that has none.
func checkLVMCSI(t *testing.T, r *Run) {
	expect := func(want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := r.KV(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
	}
	num := func(k string) int64 {
		n, err := strconv.ParseInt(r.KV(k), 10, 64)
		if err != nil {
			t.Errorf("%s = %q: not a number", k, r.KV(k))
		}
		return n
	}
	const mi = 1 << 20
	t.Logf("GetCapacity, linear class (vgthin's free extents): %s before a 64 MiB create, %s after, %s after its delete", r.KV("csi.lin.cap.before"), r.KV("csi.lin.cap.after"), r.KV("csi.lin.cap.end"))
	t.Logf("GetCapacity, thin class (pool's free data × 2): %s before a 32 MiB create, %s after, %s after its delete", r.KV("csi.cap.before"), r.KV("csi.cap.after"), r.KV("csi.cap.end"))
	if d := num("csi.lin.cap.before") - num("csi.lin.cap.after"); d != 64*mi {
		t.Errorf("a linear create of 64 MiB took %d bytes of the capacity, want exactly 64 MiB (VG free, the promise)", d)
	}
	if num("csi.lin.cap.end") != num("csi.lin.cap.before") {
		t.Errorf("linear capacity after the delete %s, before the create %s", r.KV("csi.lin.cap.end"), r.KV("csi.lin.cap.before"))
	}
	// The thin pool's data moves with what other volumes write (ext4's
	// lazy init): a margin of 4 MiB of the pool, twice.
	if d := num("csi.cap.before") - num("csi.cap.after"); d < 32*mi || d > 40*mi {
		t.Errorf("a thin create of 32 MiB took %d bytes of the capacity, want 32 MiB (and the pool's own movement)", d)
	}
	expect(map[string]string{
		"csi.lin.nolv": "yes", "csi.lin.snapshot": "InvalidArgument", "csi.create.nolv": "yes",
		"csi.lv.segtype": "thin", "csi.lv.pool": "pool", "csi.lv.size": "33554432", "csi.staged.fstype": "ext4",
		"csi.delete.staged": "FailedPrecondition", "csi.expand.bytes": "50331648", "csi.lv.grown": "50331648",
		"csi.snap.id": "snap/ostest/s1", "csi.snap.tags": "volumed-snap:csi-snap-s1", "csi.snap.active": "",
		"csi.restore.active": "active", "csi.restore.gone": "yes", "csi.snap.gone": "yes", "csi.lv.gone": "yes",
	})
	if tags := r.KV("csi.lv.tags"); len(tags) < len("volumed:csi-") || tags[:len("volumed:csi-")] != "volumed:csi-" {
		t.Errorf("the provisioned LV's tags %q, want the lvm kind's volumed:csi-…", tags)
	}
	if a, b := r.KV("csi.restore.lvtags"), r.KV("csi.lv.tags"); a == "" || a == b {
		t.Errorf("the restored LV's tags %q (the source's %q): want its own volume's", a, b)
	}
	if a, b, c := r.KV("csi.before.sum"), r.KV("csi.restore.sum"), r.KV("csi.after.sum"); a == "" || a != b || a == c {
		t.Errorf("payload: %q at the snapshot, %q restored, %q written after: want the restored copy to hold the snapshot's", a, b, c)
	}
}
