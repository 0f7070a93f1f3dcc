package ostest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/luks"
	"github.com/volumed/volumed/drivers/sss"
	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/drivers/tpm2pin"
)

// The two Tang servers of TestTang, in the guest on loopback, one tangd
// per connection from a socket unit (as Debian's tangd.socket does it):
// near answers at every boot, far is not started at the second boot until
// the test starts it.
const (
	tangNear = "http://127.0.0.1:7500"
	tangFar  = "http://127.0.0.1:7501"
)

// tangSocket is the socket unit of a guest tangd on port. Neither unit
// has default dependencies: volumed runs before sysinit.target and asks
// the server while it brings the volumes up.
func addTangServer(m *Machine, name string, port int) {
	m.AddUnit("ostest-"+name+".socket", fmt.Sprintf(`[Unit]
Description=ostest: tang server %[1]s on loopback
DefaultDependencies=no
Before=volumed.service sockets.target

[Socket]
ListenStream=127.0.0.1:%[2]d
Accept=yes
`, name, port), "sockets.target")
	m.AddFile("/etc/systemd/system/ostest-"+name+"@.service", 0o644, fmt.Sprintf(`[Unit]
Description=ostest: tangd %s
DefaultDependencies=no

[Service]
StandardInput=socket
StandardOutput=socket
StandardError=journal
ExecStart=/usr/libexec/tangd /var/lib/ostest/tang
`, name))
}

// tangVolume is a loop volume with the given luks2 keys (flow style).
func tangVolume(name, keys string) string {
	return loopVolume(name, "32Mi", "ext4", `
  encryption:
    luks2:
      keys: `+keys+`
      pbkdf: pbkdf2`)
}

// TestTang is issue 26 on a real Debian 12 under systemd, two boots of
// one machine, two Tang servers (Debian's tangd) on the guest's loopback:
//
//   - boot 1, both servers up: near (a tang key of the near server), far
//     (of the far one), pair (a threshold: 2 of near and far), both (a
//     threshold: the guest's TPM2, sealed to PCR 7, and far) and rec (a
//     key file) are formatted and opened; both's clevis token is an sss
//     JWE of a tpm2 pin and a tang pin, as Clevis writes them; `volumed recovery-key rec`
//     prints a recovery key (in no log), then the key file of rec is
//     overwritten (the key is lost) and the far server is not to start at
//     the next boot;
//   - boot 2: near opens at boot (its server up, a header of the last
//     boot); far, pair and both stay Locked, WaitingForKeyServer naming
//     the far server and its last error, as `volumed status` shows it
//     (both's TPM2 share unsealed, the same TPM, PCR 7 as it was); late (a
//     new volume of the far server) is not formatted while the server is
//     down (no header at all) and says it waits; once the far server
//     starts all four open by themselves, the agent not restarted, same
//     data;
//   - rec is Locked (its key file opens nothing); a person opens it with
//     the recovery key where cryptsetup asks for a passphrase, as the
//     volume's mapping (volumed-rec), and volumed adopts it: Ready, same
//     data.
func TestTang(t *testing.T) {
	t.Parallel()
	m := Base(t).NewMachine(t, "tang")
	tpm := addTPM(t, m)
	srv := tangtest.Start(t) // its keys, made by tangd-keygen, go to the guest
	thp := srv.Thumbprint()
	srv.Stop()
	jwks, err := filepath.Glob(filepath.Join(srv.Dir, "*.jwk"))
	if err != nil || len(jwks) == 0 {
		t.Fatalf("tang keys in %s: %v %v", srv.Dir, jwks, err)
	}
	for _, f := range jwks {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m.AddFile("/var/lib/ostest/tang/"+filepath.Base(f), 0o600, string(b))
	}
	addTangServer(m, "tangnear", 7500)
	addTangServer(m, "tangfar", 7501)
	near := fmt.Sprintf("{tang: {url: %q, thumbprint: %s}}", tangNear, thp)
	far := fmt.Sprintf("{tang: {url: %q, thumbprint: %s}}", tangFar, thp)
	for name, keys := range map[string]string{
		"near": "[" + near + "]",
		"far":  "[" + far + "]",
		"pair": "[{threshold: {n: 2, keys: [" + near + ", " + far + "]}}]",
		"rec":  "[{file: /etc/volumed/secrets/rec.key}]",
		"both": "[{threshold: {n: 2, keys: [{tpm2: {pcrs: [7]}}, " + far + "]}}]",
	} {
		m.AddFile("/etc/volumed/volumes.d/"+name+".yaml", 0o644, tangVolume(name, keys))
	}
	m.AddFile("/etc/volumed/secrets/rec.key", 0o600, "3f1c0b7a9e2d4c6b8a0f1e3d5c7b9a2e4f6d8c0b1a3e5d7c9b0a2f4e6d8c1b3a")
	script, err := os.ReadFile(filepath.Join("testdata", "tang.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddTest("tang", "Wants=volumed.service\nAfter=volumed.service", string(script))
	logHostVersions(t)

	ctx := context.Background()
	tpm.Start()
	r1 := m.Boot(ctx)
	r1.WaitDone(t, "boot1", bootTimeout)
	r1.Wait(t, shutdownTimeout)
	// A volume made while its only key server is down.
	m.AddFile("/etc/volumed/volumes.d/late.yaml", 0o644, tangVolume("late", "["+far+"]"))
	tpm.Start()
	r2 := m.Boot(ctx)
	r2.Finish(t, "boot2", 2*bootTimeout)
	t.Logf("guest packages: %s", r1.KV("versions"))

	t.Run("FirstBoot", func(t *testing.T) {
		r1.CheckGuest(t)
		for _, v := range []string{"near", "far", "pair", "rec", "both"} {
			expectKV(t, r1, map[string]string{"boot1." + v + ".phase": "Ready"})
		}
		expectKV(t, r1, map[string]string{"boot1.near.token": "clevis", "boot1.pair.token": "clevis", "boot1.rec.recovery": "systemd-recovery", "boot1.tpm": "/dev/tpmrm0"})
		checkTPM2AndTang(t, r1.KV("boot1.both.clevis"), tangFar)
	})
	t.Run("OpensAtBootWithTheServerUp", func(t *testing.T) {
		r2.CheckGuest(t)
		expectKV(t, r2, map[string]string{"boot2.near.phase": "Ready", "boot2.near.sum": r1.KV("boot1.near.sum")})
	})
	t.Run("WaitsForTheServerThenOpens", func(t *testing.T) {
		for _, v := range []string{"far", "pair", "both"} {
			st := statusKV(t, r2, "boot2."+v+".waiting")
			c := lockedCondition(st)
			if c == nil || c.Reason != "WaitingForKeyServer" || !strings.HasPrefix(c.Message, "waiting for tang server "+tangFar+": ") {
				t.Errorf("%s while the far server is down: Locked %+v, want WaitingForKeyServer naming %s and its error", v, c, tangFar)
			}
			if c != nil && strings.Contains(c.Message, "waiting for tang server "+tangNear) {
				t.Errorf("%s: the near server answers, yet the condition waits for it: %s", v, c.Message)
			}
			expectKV(t, r2, map[string]string{"after." + v + ".phase": "Ready", "after." + v + ".sum": r1.KV("boot1." + v + ".sum")})
		}
		t.Logf("volumed status far, while its server was down:\n%s", strings.ReplaceAll(r2.KV("boot2.far.text"), "|", "\n"))
		if a, b := r2.KV("agent.before"), r2.KV("agent.after"); a == "" || a != b {
			t.Errorf("volumed's MainPID/NRestarts were %q while waiting, %q once open: want the same agent", a, b)
		}
	})
	t.Run("NoHeaderWhileTheServerIsDown", func(t *testing.T) {
		st := statusKV(t, r2, "boot2.late.waiting")
		if c := lockedCondition(st); c == nil || c.Reason != "WaitingForKeyServer" || !strings.HasPrefix(c.Message, "waiting for tang server "+tangFar+": ") {
			t.Errorf("late, new, its server down: Locked %+v, want WaitingForKeyServer naming %s", c, tangFar)
		}
		expectKV(t, r2, map[string]string{"boot2.late.header": "none", "after.late.phase": "Ready", "after.late.token": "clevis"})
	})
	t.Run("RecoveryKey", func(t *testing.T) {
		st := statusKV(t, r2, "boot2.rec.locked")
		if c := lockedCondition(st); c == nil || c.Reason != "NoKeyOpens" || !strings.Contains(c.Message, "file /etc/volumed/secrets/rec.key") {
			t.Errorf("rec with its key file lost: Locked %+v, want NoKeyOpens naming the key file", c)
		} else if want := "cryptsetup open " + st.Device + " volumed-rec"; st.Device == "" || !strings.Contains(c.Message, want) {
			t.Errorf("rec's Locked condition does not say how to open it with a recovery key (%q): %s", want, c.Message)
		}
		expectKV(t, r2, map[string]string{"after.rec.phase": "Ready", "after.rec.sum": r1.KV("boot1.rec.sum")})
	})
}

// statusKV is the `volumed status -o json NAME` the guest reported as key.
func statusKV(t *testing.T, r *Run, key string) *api.Volume {
	t.Helper()
	var vs []api.Volume
	if err := json.Unmarshal([]byte(r.KV(key)), &vs); err != nil || len(vs) != 1 {
		t.Errorf("%s: %v (%d volumes) in %q", key, err, len(vs), r.KV(key))
		return nil
	}
	return &vs[0]
}

func lockedCondition(v *api.Volume) *api.Condition {
	if v == nil {
		return nil
	}
	for i := range v.Conditions {
		if v.Conditions[i].Type == "Locked" {
			return &v.Conditions[i]
		}
	}
	return nil
}

// logHostVersions puts the host's Clevis and Tang versions (the other
// side of the compatibility the host tests check) into the test's log.
func logHostVersions(t *testing.T) {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Package}=${Version} ", "clevis", "clevis-luks", "tang-common", "jose", "cryptsetup-bin").CombinedOutput()
	t.Logf("host packages: %s (%v)", strings.TrimSpace(string(out)), err)
}

// checkTPM2AndTang checks that a clevis token (cryptsetup token export)
// holds Clevis' sss pin of 2 shares: a tpm2 pin sealed to sha256 PCR 7
// and a tang pin of the server at url.
func checkTPM2AndTang(t *testing.T, token, url string) {
	t.Helper()
	ct, err := luks.ParseClevisToken([]byte(token))
	if err != nil {
		t.Fatalf("both's clevis token %q: %v", token, err)
	}
	b, err := sss.Parse(ct.JWE)
	if err != nil || b.T != 2 || len(b.JWEs) != 2 {
		t.Fatalf("both's clevis token: sss %+v %v, want 2 of 2 shares", b, err)
	}
	tb, err := tpm2pin.Parse(b.JWEs[0])
	if err != nil || !slices.Equal(tb.PCRs, []int{7}) {
		t.Errorf("both's first share: a tpm2 pin of PCRs %v (%v), want PCR 7", tb.PCRs, err)
	}
	if gb, err := tang.ParseBinding(b.JWEs[1]); err != nil || gb.URL != url {
		t.Errorf("both's second share: a tang pin of %q (%v), want %s", gb.URL, err, url)
	}
}
