package iscsi

// Login: the node record it writes (CHAP kept out of argv and messages), its checks, a session reused, a failure that leaves none.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoginWritesRecordWithoutSecretInArgv(t *testing.T) {
	for _, mutual := range []bool{false, true} {
		t.Run(fmt.Sprintf("mutual=%v", mutual), func(t *testing.T) {
			e := newEnv(t)
			tg := &fakeTarget{luns: map[int]int64{0: 2048}, user: "alice", pass: chapPw}
			chap := &CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw)}
			if mutual {
				tg.userIn, tg.passIn = "target-bob", chapIn
				chap.MutualUsername, chap.MutualPasswordFile = "target-bob", secretFile(t, chapIn)
			}
			e.serve(tData, tg)

			d, err := e.c.Login(context.Background(), Options{Target: tData, LUN: 0, CHAP: chap})
			if err != nil {
				t.Fatal(err)
			}
			if d.LUN != 0 || d.SessionID != 1 || d.SizeBytes != 2048*512 || filepath.Dir(d.Device) != e.k.dev {
				t.Fatalf("Login = %+v", d)
			}
			calls := e.f.Calls()
			argvWithout(t, calls, chapPw, chapIn)
			node := []string{"-m", "node", "-T", iqnData, "-p", "127.0.0.1:3260", "-I", "default"}
			for _, want := range [][]string{
				append(slices.Clone(node), "-o", "new"),
				append(slices.Clone(node), "-o", "update", "-n", "node.startup", "-v", "manual"),
				append(slices.Clone(node), "-o", "update", "-n", "node.session.timeo.replacement_timeout", "-v", "120"),
				append(slices.Clone(node), "--login"),
			} {
				if !hasCall(calls, want...) {
					t.Errorf("no call iscsiadm %v in %v", want, calls)
				}
			}

			path := filepath.Join(e.f.db, iqnData, "127.0.0.1,3260")
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("record %s: %v, %v; want mode 0600", path, fi, err)
			}
			rec, _ := readFakeRecord(path)
			if rec[keyAuthMethod] != "CHAP" || rec[keyUsername] != "alice" || rec[keyPassword] != chapPw ||
				rec["node.startup"] != "manual" || rec["node.session.initial_login_retry_max"] != "1" {
				t.Fatalf("record after login: %v", rec)
			}
			if mutual != (rec[keyPasswordIn] == chapIn && rec[keyUsernameIn] == "target-bob") {
				t.Fatalf("mutual credentials in record: user %q, password set %v", rec[keyUsernameIn], rec[keyPasswordIn] != "")
			}
			left, _ := filepath.Glob(filepath.Join(e.f.db, iqnData, ".volumed-*"))
			if len(left) != 0 {
				t.Fatalf("temporary files left: %v", left)
			}
		})
	}
}

func TestLoginDiscoveredRecordLayout(t *testing.T) {
	e := newEnv(t)
	e.f.discovered = true
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}, user: "alice", pass: chapPw})
	_, err := e.c.Login(context.Background(), Options{Target: tData, CHAP: &CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw)}})
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := readFakeRecord(filepath.Join(e.f.db, iqnData, "127.0.0.1,3260,1", "default")); rec[keyPassword] != chapPw {
		t.Fatal("record in a portal,tpgt directory not patched")
	}
}

func TestLoginRefusesRecordItCannotVerify(t *testing.T) {
	e := newEnv(t)
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}, user: "alice", pass: chapPw})
	e.c.NodeDB = t.TempDir() // not where this "iscsiadm" keeps its records
	_, err := e.c.Login(context.Background(), Options{Target: tData, CHAP: &CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw)}})
	if err == nil || !strings.Contains(err.Error(), "Client.NodeDB") {
		t.Fatalf("err = %v, want one pointing at Client.NodeDB", err)
	}
	if slices.ContainsFunc(e.f.Calls(), func(c []string) bool { return slices.Contains(c, "--login") }) {
		t.Fatal("logged in with a record whose credentials were not written")
	}
}

func TestLoginReusesSession(t *testing.T) {
	e := newEnv(t)
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8, 1: 16}})
	sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
	e.k.addLUN(sid, 0, 8) // LUN 1 was mapped after the login: only a rescan shows it

	d, err := e.c.Login(context.Background(), Options{Target: Target{Portal: "127.0.0.1:3260", IQN: iqnData}, LUN: 0})
	if err != nil || d.SessionID != sid {
		t.Fatalf("LUN 0: %+v, %v", d, err)
	}
	onlyCalls(t, e.f) // LUN 0 of a live session needs no iscsiadm at all
	d, err = e.c.Login(context.Background(), Options{Target: tData, LUN: 1})
	if err != nil || d.SessionID != sid || d.LUN != 1 {
		t.Fatalf("LUN 1: %+v, %v", d, err)
	}
	onlyCalls(t, e.f, []string{"-m", "session", "-r", "1", "--rescan"})
	if ids := e.k.sessionIDs(); len(ids) != 1 {
		t.Fatalf("sessions %v, want the one reused", ids)
	}
}

func TestLoginWrongSecretIsAuthErrorWithoutSecret(t *testing.T) {
	e := newEnv(t)
	const wrong = "Wrong-s3cret-XYZ"
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}, user: "alice", pass: chapPw})
	_, err := e.c.Login(context.Background(), Options{Target: tData, CHAP: &CHAP{Username: "alice", PasswordFile: secretFile(t, wrong)}})
	if !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("err = %v, want ErrAuthFailed", err)
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 24 {
		t.Fatalf("err = %v, want exit status 24", err)
	}
	msg := err.Error()
	for _, want := range []string{"ISCSI_ERR_LOGIN_AUTH_FAILED", "authorization failure", Identity(tData, 0), "[redacted]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	for _, m := range messages(err) {
		if strings.Contains(m, wrong) || strings.Contains(m, chapPw) {
			t.Fatalf("secret in error: %s", m)
		}
	}
	argvWithout(t, e.f.Calls(), wrong)
	if ids := e.k.sessionIDs(); len(ids) != 0 {
		t.Fatalf("sessions %v after a refused login", ids)
	}
}

func TestFailedLoginLeavesNoSession(t *testing.T) {
	e := newEnv(t)
	e.c.Timeout = 300 * time.Millisecond
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}})
	_, err := e.c.Login(context.Background(), Options{Target: tData, LUN: 3})
	if !errors.Is(err, ErrLUNNotFound) {
		t.Fatalf("err = %v, want ErrLUNNotFound", err)
	}
	if ids := e.k.sessionIDs(); len(ids) != 0 {
		t.Fatalf("sessions %v left by a failed login", ids)
	}
	if !hasCall(e.f.Calls(), "-m", "session", "-r", "1", "--logout") {
		t.Fatalf("new session not logged out: %v", e.f.Calls())
	}
}

func TestCHAPChecks(t *testing.T) {
	insecure := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(insecure, []byte(chapPw), 0o644))
	for name, c := range map[string]struct {
		chap *CHAP
		want string
	}{
		"trailing space":    {&CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw+" ")}, "white space"},
		"control character": {&CHAP{Username: "alice", PasswordFile: secretFile(t, "Chap\ts3cret-one")}, "control character"},
		"too long":          {&CHAP{Username: "alice", PasswordFile: secretFile(t, strings.Repeat("x", 256))}, "longer than 255"},
		"world readable":    {&CHAP{Username: "alice", PasswordFile: insecure}, "mode 0644"},
		"no username":       {&CHAP{PasswordFile: secretFile(t, chapPw)}, "chap username is empty"},
		"no password file":  {&CHAP{Username: "alice"}, "passwordFile is empty"},
		"half mutual":       {&CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw), MutualUsername: "bob"}, "both mutualUsername and mutualPasswordFile"},
		"same both ways": {&CHAP{Username: "alice", PasswordFile: secretFile(t, chapPw),
			MutualUsername: "bob", MutualPasswordFile: secretFile(t, chapPw)}, "two different secrets"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.c.Login(context.Background(), Options{Target: tData, CHAP: c.chap})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("secret in error: %v", err)
			}
			onlyCalls(t, e.f) // nothing runs with bad credentials
		})
	}
}

func TestInitiatorNameUsesOwnIface(t *testing.T) {
	e := newEnv(t)
	const initiator = "iqn.2024-01.io.example:host-a"
	iface := ifaceName(initiator)
	logs := Target{Portal: "127.0.0.1", IQN: iqnLogs}
	e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}})
	e.serve(logs, &fakeTarget{luns: map[int]int64{0: 8}})
	if _, err := e.c.Login(context.Background(), Options{Target: tData, InitiatorName: initiator}); err != nil {
		t.Fatal(err)
	}
	calls := e.f.Calls()
	for _, want := range [][]string{
		{"-m", "iface", "-I", iface, "-o", "new"},
		{"-m", "iface", "-I", iface, "-o", "update", "-n", "iface.initiatorname", "-v", initiator},
		{"-m", "node", "-T", iqnData, "-p", "127.0.0.1:3260", "-I", iface, "--login"},
	} {
		if !hasCall(calls, want...) {
			t.Errorf("no call iscsiadm %v in %v", want, calls)
		}
	}
	ss, _ := e.c.Sessions()
	if len(ss) != 1 || ss[0].InitiatorName != initiator || ss[0].Iface != iface {
		t.Fatalf("sessions %+v", ss)
	}
	// The iface exists now and is busy: the next target must not touch it.
	e.f.resetCalls()
	if _, err := e.c.Login(context.Background(), Options{Target: logs, InitiatorName: initiator}); err != nil {
		t.Fatal(err)
	}
	for _, c := range e.f.Calls() {
		if c[1] == "iface" && c[len(c)-1] != "show" {
			t.Fatalf("changed a busy iface: %v", c)
		}
	}
	if ifaceName(initiator) != iface || ifaceName("iqn.2024-01.io.example:host-b") == iface || len(iface) > 64 {
		t.Fatal("iface names are not one per initiator name")
	}
}

func TestPatchRecord(t *testing.T) {
	rec := "# BEGIN RECORD 2.1.8\nnode.name = iqn.x\nnode.session.auth.authmethod = None\n" +
		"node.session.auth.password=old-one\n  node.session.auth.password_in   =   old-two  \n" +
		"node.session.auth.password_length = 7\nnode.conn[0].port = 3260\n# END RECORD\n"
	want := credentials{method: "CHAP", username: "alice", password: chapPw}.values()
	out, err := patchRecord([]byte(rec), want)
	if err != nil {
		t.Fatal(err)
	}
	wantOut := "# BEGIN RECORD 2.1.8\nnode.name = iqn.x\nnode.session.auth.password_length = 7\nnode.conn[0].port = 3260\n" +
		"node.session.auth.authmethod = CHAP\nnode.session.auth.username = alice\nnode.session.auth.password = " + chapPw + "\n# END RECORD\n"
	if string(out) != wantOut {
		t.Fatalf("patched:\n%s\nwant:\n%s", out, wantOut)
	}
	for _, bad := range []string{"node.name = x\n", "# BEGIN RECORD\n# END RECORD\n# BEGIN RECORD\n# END RECORD\n"} {
		if _, err := patchRecord([]byte(bad), want); err == nil {
			t.Errorf("patched %q", bad)
		}
	}
	if _, err := patchRecord([]byte(rec), map[string]string{keyPassword: "a\nnode.startup = automatic"}); err == nil {
		t.Error("patched in a value with a newline")
	}
}
