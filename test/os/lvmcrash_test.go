package ostest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	lvmdrv "github.com/volumed/volumed/drivers/lvm"
)

// The LVM crash points in the order testdata/lvmcrash.sh cuts them: the
// making of vgcp over CP1 and CP2 (its thin pool, the volume's LV),
// then its growth by CP3 with a larger size. Each run is the previous
// crash's restart; a plain run ends the chain.
var lvmCrashPoints = []string{
	"pvcreate:after-intent", "pvcreate:after-kernel", "vgcreate:after-intent", "vgcreate:after-kernel",
	"lvcreate-pool:after-intent", "lvcreate-pool:after-kernel", "lvcreate:after-intent", "lvcreate:after-kernel",
	"vgextend:after-intent", "vgextend:after-kernel", "lvextend:after-intent", "lvextend:after-kernel",
	"converge",
}

// addLVMCrash readies the second boot of TestLVMGroup's machine for the
// crash points: the spare disks CP1..CP5 (no serial starting with VG, so
// the machine's own volumes never pick them), the crashpoints build of
// volumed and the script, which lvmgroup.sh runs at its end.
func addLVMCrash(t *testing.T, m *Machine) {
	t.Helper()
	for _, s := range []string{"CP1", "CP2", "CP3", "CP4", "CP5"} {
		m.AddDisk(s, 64<<20)
	}
	bin := filepath.Join(m.Dir, "volumed-crash")
	build := exec.Command("go", "build", "-tags", "crashpoints", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/volumed")
	build.Dir = m.img.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build volumed -tags crashpoints: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	m.AddFile("/usr/lib/ostest/volumed-crash", 0o755, string(b))
	script, err := os.ReadFile(filepath.Join("testdata", "lvmcrash.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddFile("/usr/lib/ostest/lvmcrash.sh", 0o644, string(script))
	m.AddFile("/usr/lib/ostest/cpbin/lvm", 0o755, lvmRecorder)
}

// lvmRecorder stands in front of lvm on the crash agent's PATH: each
// command, its vector on one line, then the real lvm. No process of its
// own but the shell (each costs ~0.2 s of emulated CPU, at every lvm2
// command the agent runs); volumed's arguments hold no newline (lvm2's
// names cannot, and a device it names in a filter may not).
const lvmRecorder = `#!/bin/sh
printf '%s\n' "$*" >>/run/cpcrash/lvm.log
exec /usr/sbin/lvm "$@"
`

// lvmState is what a run left, by UUID and tags: the CP disks' PVs
// (device -> "vg uuid"), the VGs on them tagged volumed:vgcp (the crash
// agent's selector picks no other disk), vgcp's LVs.
type lvmState struct {
	PVs map[string]string
	VGs []map[string]string
	LVs []map[string]string
}

// parseLVMState reads cp.N.left: lvm2's pvs (with each PV's VG) and lvs
// JSON reports one after the other.
func parseLVMState(s string) (lvmState, error) {
	st := lvmState{PVs: map[string]string{}}
	dec := json.NewDecoder(strings.NewReader(s))
	for {
		var doc struct {
			Report []map[string][]map[string]string `json:"report"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return st, nil
		} else if err != nil {
			return st, fmt.Errorf("report %q: %w", s, err)
		}
		for _, r := range doc.Report {
			for _, pv := range r["pv"] {
				st.PVs[pv["pv_name"]] = pv["vg_name"] + " " + pv["pv_uuid"]
				known := slices.ContainsFunc(st.VGs, func(vg map[string]string) bool { return vg["vg_uuid"] == pv["vg_uuid"] })
				if pv["vg_tags"] == lvmdrv.Tag("vgcp") && !known {
					st.VGs = append(st.VGs, map[string]string{"vg_name": pv["vg_name"], "vg_uuid": pv["vg_uuid"], "vg_tags": pv["vg_tags"]})
				}
			}
			st.LVs = append(st.LVs, r["lv"]...)
		}
	}
}

// tagged is the UUIDs of the LVs carrying tag.
func (s lvmState) tagged(tag string) []string {
	var out []string
	for _, lv := range s.LVs {
		if lv["lv_tags"] == tag {
			out = append(out, lv["lv_uuid"])
		}
	}
	return out
}

// String: the table's "left" column.
func (s lvmState) String() string {
	var pvs []string
	for dev, p := range s.PVs {
		vg, _, _ := strings.Cut(p, " ")
		pvs = append(pvs, dev+"→"+cmpOr(vg, "orphan"))
	}
	var lvs []string
	for _, lv := range s.LVs {
		a := "inactive"
		if lv["lv_active"] == "active" {
			a = "active"
		}
		lvs = append(lvs, lv["lv_name"]+" "+lv["lv_tags"]+" "+a)
	}
	return fmt.Sprintf("PVs %v, tagged VGs %d, LVs %v", pvs, len(s.VGs), lvs)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkLVMCrash: every point killed the agent, every restart went on
// from what the crash left without a second pvcreate, vgcreate,
// vgextend, lvcreate or lvextend (lvm2's commands as the agent ran them,
// and the PVs', VG's, pool's and LV's UUIDs, which stay those the first
// command made), the volume Ready and grown, nothing else touched.
func checkLVMCrash(t *testing.T, r *Run) {
	t.Run("CrashPoints", func(t *testing.T) {
		counts := map[string]int{}
		uuids := map[string]string{} // what made it -> the UUID it left
		var table bytes.Buffer
		for i, point := range lvmCrashPoints {
			n := strconv.Itoa(i + 1)
			if got := r.KV("cp." + n + ".point"); got != point {
				t.Fatalf("run %s was %q, want %q", n, got, point)
			}
			if point != "converge" && r.KV("cp."+n+".exit") != "137" {
				t.Errorf("%s: the agent exited %q, want 137 (SIGKILL)", point, r.KV("cp."+n+".exit"))
			}
			st, err := parseLVMState(r.KV("cp." + n + ".left"))
			if err != nil {
				t.Fatal(err)
			}
			cmds := strings.TrimSuffix(r.KV("cp."+n+".cmds"), ";")
			for _, c := range strings.Split(cmds, ";") {
				if f := strings.Fields(c); len(f) == 3 {
					counts[commandKey(f)]++
					if f[0] == "pvcreate" {
						counts["pvcreate "+f[2]]++
					}
					if !strings.HasPrefix(f[2], "vgcp") && !strings.HasPrefix(f[2], "/dev/") {
						t.Errorf("%s: lvm2 command %q names no vgcp object", point, c)
					}
				}
			}
			checkUUIDsKept(t, point, st, uuids)
			fmt.Fprintf(&table, "| %s | %s | %s |\n", point, st, cmds)
		}
		t.Logf("the crash points (%s s of guest time):\n| point | what it left | what that run ran |\n%s", r.KV("cp.guest.seconds"), table.String())
		if len(counts) != 9 {
			t.Errorf("lvm2's writing commands over all runs: %v, want pvcreate (once on each of 3 disks), vgcreate, vgextend, lvcreate thin-pool and linear, lvextend", counts)
		}
		want := map[string]int{"pvcreate": 3, "vgcreate": 1, "vgextend": 1, "lvcreate thin-pool": 1, "lvcreate linear": 1, "lvextend": 1}
		for k, v := range want {
			if counts[k] != v {
				t.Errorf("%s ran %d times over all runs, want %d (all: %v)", k, counts[k], v, counts)
			}
		}
		for k := range counts {
			if strings.HasPrefix(k, "pvcreate ") && counts[k] != 1 {
				t.Errorf("%s ran %d times, want once", k, counts[k])
			}
		}
		last, err := parseLVMState(r.KV(fmt.Sprintf("cp.%d.left", len(lvmCrashPoints))))
		if err != nil {
			t.Fatal(err)
		}
		for dev, p := range last.PVs {
			vg, u, _ := strings.Cut(p, " ")
			if vg != "vgcp" || !lvmdrv.OursFor("vgcp", u) {
				t.Errorf("PV %s is %q, want one volumed made in vgcp", dev, p)
			}
		}
		if len(last.PVs) != 3 || len(last.VGs) != 1 || len(last.tagged(lvmdrv.Tag("cp"))) != 1 || len(last.tagged(lvmdrv.PoolTag("cpool"))) != 1 {
			t.Errorf("at the end: %s, want 3 PVs, one tagged VG, one pool and one LV", last)
		}
		expectKV(t, r, map[string]string{"cp.13.phase": "Ready",
			"cp.others.after": r.KV("cp.others.before"), "cp.system.data": "Ready", "cp.system.thin": "Ready", "cp.system.adopt": "Ready",
			// The image's volumed, started again, lists vgcp and vgcpf
			// (tagged, named by none of its manifests) as leftovers.
			"cp.leftover.vgcp": "1", "cp.leftover.vgcpf": "1"})
		a, err1 := strconv.ParseInt(r.KV("cp.fs.before"), 10, 64)
		b, err2 := strconv.ParseInt(r.KV("cp.fs.after"), 10, 64)
		if err1 != nil || err2 != nil || b <= a {
			t.Errorf("the filesystem was %q bytes before the growth, %q after: want it grown", r.KV("cp.fs.before"), r.KV("cp.fs.after"))
		}
	})
}

// commandKey: "lvcreate TYPE", else the command.
func commandKey(f []string) string {
	if f[0] == "lvcreate" {
		return f[0] + " " + f[1]
	}
	return f[0]
}

// checkUUIDsKept: a PV, the VG, the pool and the LV keep the UUID they
// were first seen with (a second pvcreate --uuid would keep a PV's, but
// never go unseen by the command count).
func checkUUIDsKept(t *testing.T, point string, st lvmState, seen map[string]string) {
	t.Helper()
	keep := func(what, uuid string) {
		if uuid == "" {
			return
		}
		if old, ok := seen[what]; ok && old != uuid {
			t.Errorf("after %s: %s is %s, was %s: made again", point, what, uuid, old)
		}
		seen[what] = uuid
	}
	for dev, p := range st.PVs {
		_, u, _ := strings.Cut(p, " ")
		keep("PV "+dev, u)
	}
	for _, vg := range st.VGs {
		keep("VG vgcp", vg["vg_uuid"])
	}
	for _, tag := range []string{lvmdrv.Tag("cp"), lvmdrv.PoolTag("cpool")} {
		for _, u := range st.tagged(tag) {
			keep("LV "+tag, u)
		}
	}
}

// checkLVMFollow: the LV of source.lvm.grow took every free extent of
// its VG, then those of the disk that joined it, with its filesystem.
func checkLVMFollow(t *testing.T, r *Run) {
	t.Run("AnLVFollowsItsVG", func(t *testing.T) {
		expectKV(t, r, map[string]string{"cpf.free1": "0", "cpf.free2": "0", "cpf.pvs": "2", "cpf.fsgrown": "yes"})
		a, err1 := strconv.ParseInt(r.KV("cpf.size1"), 10, 64)
		b, err2 := strconv.ParseInt(r.KV("cpf.size2"), 10, 64)
		if err1 != nil || err2 != nil || b < a+(32<<20) {
			t.Errorf("the LV was %q bytes over one disk, %q over two: want it grown by the second disk's extents", r.KV("cpf.size1"), r.KV("cpf.size2"))
		}
	})
}

// parseLVMState, on the host: each VG tagged volumed:vgcp once, however
// many of the CP disks' PVs it spans; an orphan PV kept with no VG.
func TestParseLVMState(t *testing.T) {
	left := `{"report":[{"pv":[{"pv_name":"/dev/vdg","pv_uuid":"p1","vg_name":"vgcp","vg_uuid":"v1","vg_tags":"volumed:vgcp"},` +
		`{"pv_name":"/dev/vdh","pv_uuid":"p2","vg_name":"vgcp","vg_uuid":"v1","vg_tags":"volumed:vgcp"},` +
		`{"pv_name":"/dev/vdi","pv_uuid":"p3","vg_name":"","vg_uuid":"","vg_tags":""}]}]}` +
		`{"report":[{"lv":[{"lv_name":"cp","lv_uuid":"l1","lv_tags":"volumed:cp","lv_active":"active","lv_size":"33554432"}]}]}`
	st, err := parseLVMState(left)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.VGs) != 1 || st.VGs[0]["vg_uuid"] != "v1" || st.PVs["/dev/vdi"] != " p3" || st.PVs["/dev/vdg"] != "vgcp p1" {
		t.Errorf("parsed %s (VGs %v), want vgcp once over vdg and vdh, vdi an orphan", st, st.VGs)
	}
	if got := st.tagged(lvmdrv.Tag("cp")); !slices.Equal(got, []string{"l1"}) {
		t.Errorf("LVs tagged volumed:cp: %v, want [l1]", got)
	}
}
