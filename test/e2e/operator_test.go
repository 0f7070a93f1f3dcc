package e2e

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sample returns the value of the series whose line starts with prefix.
func sample(t *testing.T, body, prefix string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("bad sample %q", line)
			}
			return v, true
		}
	}
	return 0, false
}

// /metrics of a running agent: a 64 MiB volume reports a capacity close
// to 64 MiB and phase Ready; a failing operation counts an error.
func TestMetricsEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := freeAddr(t)
	e.extraArgs = []string{"--metrics-address", addr, "--resync", "300ms"}
	e.volume("m", "ext4", "64Mi", "m")
	xfs := e.image("bad.img", 320<<20)
	if out, err := execOut("mkfs.xfs", "-q", xfs); err != nil {
		t.Fatalf("mkfs.xfs: %v %s", err, out)
	}
	e.volume("bad", "ext4", "320Mi", "bad")
	e.start()
	e.waitReady("m")
	e.waitPhase("bad", api.PhaseError)
	var body string
	e.waitFor("capacity in /metrics", func(*api.Status) bool {
		body = scrape(t, addr)
		_, ok := sample(t, body, `volumed_volume_capacity_bytes{volume="m"}`)
		return ok
	})
	capacity, _ := sample(t, body, `volumed_volume_capacity_bytes{volume="m"}`)
	if capacity < 50<<20 || capacity > 64<<20 {
		t.Errorf("capacity of a 64 MiB ext4 volume = %.0f bytes", capacity)
	}
	for _, want := range []string{
		`volumed_volume_phase{phase="Ready",volume="m"} 1`,
		`volumed_volume_phase{phase="Error",volume="bad"} 1`,
		`volumed_volume_phase{phase="Pending",volume="m"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if v, ok := sample(t, body, `volumed_operation_errors_total{driver="loop",operation="mount_device"}`); !ok || v < 1 {
		t.Errorf("mount_device errors = %v (present %v), want >= 1", v, ok)
	}
	if v, ok := sample(t, body, `volumed_operation_duration_seconds_count{driver="loop",operation="attach",result="success"}`); !ok || v < 2 {
		t.Errorf("attach successes = %v, want >= 2", v)
	}
	for _, name := range []string{"volumed_build_info{", "volumed_volume_used_bytes{", "volumed_volume_inodes_free{",
		"volumed_state_commit_duration_seconds_count", "volumed_reconcile_duration_seconds_count", "volumed_manifest_errors ",
		"go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Labels stay bounded: no paths or error texts as label values.
	if regexp.MustCompile(`\{[^}]*="/`).MatchString(body) {
		t.Error("a metric carries a path as a label value")
	}
	// A refused manifest file shows in volumed_manifest_errors.
	e.write("broken.yaml", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: x}\nspec: {sourc: {}}\n")
	e.waitFor("manifest error counted", func(*api.Status) bool {
		v, _ := sample(t, scrape(t, addr), "volumed_manifest_errors ")
		return v == 1
	})
}

// READY=1 reaches systemd only once the volumes are mounted; WATCHDOG=1
// comes at half of WatchdogSec.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sock := filepath.Join(e.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e.volume("n1", "ext4", "64Mi", "n1")
	e.volume("n2", "xfs", "320Mi", "n2")
	e.start("NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")

	var readyAt map[string][]int
	watchdogs := 0
	buf := make([]byte, 4096)
	deadline := time.Now().Add(60 * time.Second)
	for (readyAt == nil || watchdogs < 3) && time.Now().Before(deadline) {
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notify socket: %v", err)
		}
		msg := string(buf[:n])
		if strings.Contains(msg, "READY=1") && readyAt == nil {
			readyAt = e.mountIDs() // what is mounted at the instant READY=1 arrived
			if !strings.Contains(msg, "STATUS=2 ready") {
				t.Errorf("READY=1 without the volume counts: %q", msg)
			}
		}
		if strings.Contains(msg, "WATCHDOG=1") {
			watchdogs++
		}
	}
	if readyAt == nil {
		t.Fatal("READY=1 never arrived")
	}
	for _, p := range []string{e.target("n1"), e.target("n2"), e.staging("n1"), e.staging("n2")} {
		if len(readyAt[p]) != 1 {
			t.Errorf("READY=1 arrived before %s was mounted", p)
		}
	}
	if watchdogs < 3 {
		t.Errorf("%d WATCHDOG=1 in 60s with WatchdogSec=0.4s", watchdogs)
	}
	_ = os.Remove(sock)
}

// READY=1 does not wait for a network volume's first attempt: at boot the
// network may not be up yet and a login runs into its timeouts, while
// every service of the boot waits for READY=1 (found by test/os: 35 s of
// iscsiadm). The local volume is mounted when READY=1 arrives; the iSCSI
// login (a fake iscsiadm that hangs) is still running.
func TestSystemdNotifyNotHeldByNetworkVolume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sock := filepath.Join(e.dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bin := filepath.Join(e.dir, "bin")
	started := filepath.Join(e.dir, "iscsiadm-started")
	// Sessions: none (21, ISCSI_ERR_NO_OBJS_FOUND); anything else hangs.
	fake := "#!/bin/sh\ncase \"$*\" in *'-m session'*) exit 21 ;; esac\ntouch " + started + "\nexec sleep 120\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "iscsiadm"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	e.volume("local", "ext4", "64Mi", "local")
	e.write("net.yaml", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: net}\nspec:\n  source:\n    iscsi: {portal: \"192.0.2.1:3260\", iqn: iqn.2026-11.io.example:t, lun: 0}\n  filesystem: {type: ext4}\n  mounts: [{path: "+filepath.Join(e.mnt, "net")+"}]\n")
	e.start("NOTIFY_SOCKET="+sock, "PATH="+bin+":"+os.Getenv("PATH"))

	buf := make([]byte, 4096)
	deadline := time.Now().Add(60 * time.Second) // the fake login hangs for 120 s
	for {
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			_, serr := os.Stat(started)
			t.Fatalf("no READY=1 while the iSCSI login hangs (%v; the fake iscsiadm started: %v)\n%s", err, serr == nil, e.logText())
		}
		if strings.Contains(string(buf[:n]), "READY=1") {
			break
		}
	}
	if ids := e.mountIDs(); len(ids[e.target("local")]) != 1 {
		t.Errorf("READY=1 arrived before the local volume was mounted")
	}
	_ = os.Remove(sock)
}
