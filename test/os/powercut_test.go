package ostest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volumed/volumed/test/crashcheck"
)

// The power cut's volumes: loop images (ext4 and one xfs), two GPT
// partitions of a blank disk, and a LUKS2 loop volume opened by a key file.
var (
	cutLoops      = []string{"l1", "l2", "l3", "l4", "l5", "l6", "l7"}
	cutPartitions = []string{"alpha", "beta"}
	cutAll        = append(append(append([]string{}, cutLoops...), "x1", "vault"), cutPartitions...)
)

func cutManifests() map[string]string {
	out := map[string]string{}
	for _, v := range cutLoops {
		out[v] = loopVolume(v, "16Mi", "ext4", "")
	}
	out["x1"] = loopVolume("x1", "320Mi", "xfs", "")
	out["vault"] = loopVolume("vault", "32Mi", "ext4", `
  encryption:
    luks2:
      keys: [{file: /etc/volumed/secrets/vault.key}]
      pbkdf: pbkdf2`)
	for i, p := range cutPartitions {
		amount := "size: 64Mi"
		if i == len(cutPartitions)-1 {
			amount = "grow: true"
		}
		out[p] = fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %[1]s}
spec:
  source:
    partition: {disk: {serial: PARTS}, label: %[1]s, %[2]s}
  filesystem: {type: ext4}
  mounts: [{path: /srv/%[1]s}]
`, p, amount)
	}
	return out
}

func loopVolume(name, size, fstype, extra string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %[1]s}
spec:
  source:
    loop: {file: /var/lib/ostest/%[1]s.img, create: {size: %[2]s}}%[4]s
  filesystem: {type: %[3]s}
  mounts: [{path: /srv/%[1]s}]
`, name, size, fstype, extra)
}

// The writer starts with volumed (not after it: the agent's READY holds
// back every ordinary unit until it converged) and, for each volume as
// soon as it is mounted at its target, reports its filesystem's UUID and
// writes numbered files, each reported only once it and its directory
// were fsync'd. The boot after the cut carries checkboot and skips it.
const cutWriterUnit = `[Unit]
Description=ostest: write fsync'd files into the volumes while volumed brings them up
DefaultDependencies=no
After=local-fs.target
ConditionPathExists=!/usr/lib/ostest/checkboot

[Service]
Type=exec
ExecStartPre=/bin/sh -c 'echo "OSTEST-KV phase starting" >/dev/ttyS0'
ExecStart=/usr/lib/ostest/powercut write
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=sysinit.target
`

// Before volumed in the boot after the cut: what is on each image and
// partition before the agent touches anything.
const cutPrecheckUnit = `[Unit]
Description=ostest: signatures before volumed starts
DefaultDependencies=no
After=local-fs.target systemd-udevd.service
Before=volumed.service
ConditionPathExists=/usr/lib/ostest/checkboot

[Service]
Type=oneshot
ExecStartPre=/bin/sh -c 'echo "OSTEST-KV phase precheck" >/dev/ttyS0'
ExecStart=/usr/lib/ostest/powercut signatures pre
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=volumed.service
`

// The check after the cut boot: every volume converged, every file the
// writer reported is there, nothing leaked or doubled.
const cutCheck = `
check "every volume Ready" volumed wait --timeout 5m $VOLUMES
/usr/lib/ostest/powercut signatures post
/usr/lib/ostest/powercut check /usr/lib/ostest/expect $VOLUMES
n=$(volumed status -o json | grep -c '"phase": "Ready"'); [ "$n" = $(echo $VOLUMES | wc -w) ] || fail "$n volumes Ready: $(volumed status 2>&1 | tr '\n' ' ')"
n=$(losetup -n -O NAME | wc -l); [ "$n" = $LOOPS ] || fail "$n loop devices, want $LOOPS: $(losetup -n -O NAME,BACK-FILE | tr '\n' ' ')"
d=$(losetup -n -O BACK-FILE | sort | uniq -d); [ -z "$d" ] || fail "two loop devices on $d"
m=$(dmsetup ls | grep -v '^No devices' | awk '{print $1}' | tr '\n' ' '); [ "$m" = "volumed-vault " ] || fail "device-mapper mappings: $m, want volumed-vault"
done_step check
`

// TestPowerCut is scenario 4 of issue 21: qemu killed at a seeded random
// moment while the first boot creates, formats and mounts 11 volumes
// (loop ext4 and xfs, two partitions of a blank disk, a LUKS2 loop
// volume), then booted again on the same disk. Each cut is its own
// machine, resumed from a snapshot of the first boot taken just before
// volumed starts (cutSnapshot). After each: every volume
// Ready, no filesystem formatted twice (its UUID before the agent started
// is its UUID after, and the one the cut boot saw mounted), no loop
// device or mapping leaked or doubled, every file the cut boot fsync'd
// intact. VOLUMED_POWERCUT_CUTS (default 20) and VOLUMED_POWERCUT_SEED.
func TestPowerCut(t *testing.T) {
	t.Parallel()
	img := Base(t)
	cuts, seed := crashcheck.EnvInt(t, "VOLUMED_POWERCUT_CUTS", 20), crashcheck.EnvInt(t, "VOLUMED_POWERCUT_SEED", time.Now().UnixNano())
	t.Logf("%d cuts, seed %d (VOLUMED_POWERCUT_CUTS, VOLUMED_POWERCUT_SEED)", cuts, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	start := time.Now()
	// The first machine runs its first boot to the end of the window:
	// how long the agent works sets where the other cuts fall.
	key := fmt.Sprintf("ostest power cut key, of full entropy for pbkdf2's sake: %x\n", rand.Uint64())
	tool := guestTool(t, "./test/os/powercut")
	snap := cutSnapshot(t, img, key, tool)
	window := cutAndCheck(t, img, snap, key, tool, 0, -1)
	t.Logf("cut 0 at the end of the window: the agent mounted every volume %s of qemu CPU after the writer started", window.Round(100*time.Millisecond))
	delays := make([]time.Duration, cuts)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(window) * 11 / 10))
	}
	// As many cuts at a time as there are VM slots, each to its check:
	// with one goroutine per cut, every cut's first boot would queue
	// before the first check boot; with fewer, the tier's tail (this
	// test is most of it) would leave slots idle once the others are
	// done.
	next := make(chan int)
	var wg sync.WaitGroup
	for range cap(img.slots) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t.Run(fmt.Sprintf("cut%02d", i), func(t *testing.T) { cutAndCheck(t, img, snap, key, tool, i, delays[i]) })
			}
		}()
	}
	for i := 1; i < int(cuts); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d power cuts checked in %s", cuts, time.Since(start).Round(time.Second))
}

// cutFiles are both boots' files of a power-cut machine. The seed's
// files reach the root filesystem at boot, unflushed: a cut in the first
// seconds loses them, where an image would have had them all along. Both
// boots get them.
func cutFiles(m *Machine, key, tool string) {
	for name, text := range cutManifests() {
		m.AddFile("/etc/volumed/volumes.d/"+name+".yaml", 0o644, text)
	}
	m.AddFile("/etc/volumed/secrets/vault.key", 0o600, key)
	m.AddFile("/usr/lib/ostest/powercut", 0o755, tool)
	m.AddUnit("cutwriter.service", strings.Replace(cutWriterUnit, "powercut write", "powercut write "+strings.Join(cutAll, " "), 1), "sysinit.target")
	m.AddUnit("cutprecheck.service", cutPrecheckUnit, "volumed.service")
}

// cutGateUnit holds the agent and the writer back in the template's first
// boot, where it is saved (Snapshot): every cut resumes there.
const cutGateUnit = `[Unit]
Description=ostest: the power cuts' snapshot is taken here, before volumed starts
DefaultDependencies=no
After=local-fs.target systemd-udevd.service systemd-tmpfiles-setup.service systemd-modules-load.service
Before=volumed.service cutwriter.service
ConditionPathExists=!/usr/lib/ostest/checkboot

[Service]
Type=oneshot
TimeoutStartSec=infinity
ExecStart=/usr/lib/ostest/gate.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`

// cutSnapshot boots the power cuts' template up to the moment volumed
// and the writer would start, and saves it there: each cut resumes it
// instead of paying for that boot (about 15 s of emulated CPU each).
func cutSnapshot(t *testing.T, img *Image, key, tool string) *Snapshot {
	m := img.NewMachine(t, "cut-template")
	m.AddQcow2Disk("PARTS", 256<<20)
	cutFiles(m, key, tool)
	m.AddFile("/usr/lib/ostest/gate.sh", 0o755, "#!/bin/sh\n. /usr/lib/ostest/lib.sh\n"+waitConsoleLine+"\n")
	m.AddUnit("cutgate.service", cutGateUnit, "volumed.service", "cutwriter.service")
	return m.Boot(context.Background()).SaveWhenWaiting(t, "cut")
}

// cutAndCheck resumes a machine of the template, cuts its power once
// qemu has used delay of CPU since the writer started (delay < 0: once
// every volume is mounted, returning the CPU that took), boots it again
// and checks it. CPU, not wall time: the window is measured while the
// rest of the tier runs and the cuts come later, on a machine busier or
// quieter; in wall time they would fall past the window's end (where the
// work is done) or short of it.
func cutAndCheck(t *testing.T, img *Image, snap *Snapshot, key, tool string, n int, delay time.Duration) time.Duration {
	m := img.NewMachineFrom(t, fmt.Sprintf("cut%02d", n), snap)
	ctx := context.Background()
	booted := time.Now()
	r := m.Boot(ctx)
	r.WaitFor(t, "OSTEST-KV phase starting", 5*time.Minute)
	began := time.Now()
	t.Logf("phase: writer started %s after qemu", began.Sub(booted).Round(100*time.Millisecond))
	c0, err := r.CPU()
	if err != nil {
		t.Fatalf("qemu's CPU: %v", err)
	}
	if delay < 0 {
		r.WaitFor(t, "OSTEST-KV phase all-mounted", 5*time.Minute)
		c1, err := r.CPU()
		if err != nil {
			t.Fatalf("qemu's CPU: %v", err)
		}
		delay = c1 - c0
	} else {
		r.WaitCPU(t, c0+delay, 5*time.Minute)
	}
	r.Kill()
	t.Logf("power cut after %s of qemu CPU (%s) since the writer started", delay.Round(10*time.Millisecond), time.Since(began).Round(10*time.Millisecond))

	var expect strings.Builder
	synced := 0
	for _, v := range cutAll {
		if k := r.KV("synced." + v); k != "" {
			fmt.Fprintf(&expect, "%s %s\n", v, k)
			c, _ := strconv.Atoi(k)
			synced += c
		}
	}
	// The seed goes with one boot: a boot again gets it again.
	prepare := func() {
		cutFiles(m, key, tool)
		m.AddFile("/usr/lib/ostest/checkboot", 0o644, "")
		m.AddFile("/usr/lib/ostest/expect", 0o644, expect.String())
		// One volumed wait for all eleven, not eleven volumed-wait@ units:
		// each is a process of about 0.3 s of emulated CPU, and the units'
		// ordering is TestLifecycle's to check.
		m.AddTest("check", "", fmt.Sprintf("VOLUMES='%s'\nLOOPS=%d\n", strings.Join(cutAll, " "), len(cutLoops)+2)+cutCheck)
	}
	rebooted := time.Now()
	r2 := bootPastRoot(t, m, prepare)
	r2.Finish(t, "check", 6*time.Minute)
	t.Logf("phase: check boot checked in %s", time.Since(rebooted).Round(100*time.Millisecond))
	r2.CheckGuest(t)
	for _, v := range cutAll {
		pre, post := r2.KV("pre."+v), r2.KV("post."+v)
		if pre != "" && post != pre {
			t.Errorf("%s: formatted again after the cut: %s before the agent started, %s after", v, pre, post)
		}
		if seen, now := r.KV("ready."+v), r2.KV("fs."+v); seen != "" && now != seen {
			t.Errorf("%s: the cut boot had filesystem %s mounted, the next boot %s", v, seen, now)
		}
	}
	t.Logf("cut at %s: %d fsync'd files checked", delay.Round(10*time.Millisecond), synced)
	return delay
}

// rootHang is what the guest kernel prints for a task blocked two
// minutes: in 2 of about 40 check boots over two runs of the tier, the
// initramfs's mount of the root after the cut never returned, with qemu
// idle and no I/O outstanding (an I/O completion lost in the emulation
// under load, before any of volumed's code runs).
const rootHang = "blocked for more than"

// bootPastRoot boots m for its check. A boot that hangs in the kernel
// before userspace runs the precheck is cut again and booted once more
// (to the disk, one more power cut, during the root's journal replay);
// the test fails if the second hangs too.
func bootPastRoot(t *testing.T, m *Machine, prepare func()) *Run {
	t.Helper()
	for try := 1; ; try++ {
		prepare()
		r := m.Boot(context.Background())
		if try == 2 || !hungBeforeUserspace(r, 6*time.Minute, 20*time.Second) {
			return r // a boot that neither hung nor checked fails in its Finish, with the console's tail
		}
		t.Logf("%s: the check boot hung in the kernel before userspace (%s); cut and booted again",
			m.Name, strings.TrimSpace(r.Lines(rootHang)[0]))
		r.Kill()
	}
}

// precheckMark is the first line of a check boot's userspace
// (cutPrecheckUnit).
const precheckMark = "OSTEST-KV phase precheck"

// hungBeforeUserspace waits up to within for the precheck's mark, looking
// every poll for the kernel's report of a hung task: true when that report
// came and the mark did not.
func hungBeforeUserspace(r *Run, within, poll time.Duration) bool {
	for waited := time.Duration(0); waited < within; waited += poll {
		if _, err := r.waitLine(precheckMark, poll); err == nil {
			return false
		}
		if len(r.Lines(rootHang)) > 0 {
			return true
		}
	}
	return false
}
