package iscsi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
)

// helperEnv makes the test binary act as a stand-in iscsiadm process, so
// ExecRunner is tested against a real child process and exit status.
const helperEnv = "VOLUMED_ISCSIADM_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "auth-failure":
		fmt.Fprintln(os.Stderr, "iscsiadm: Could not login to [iface: default, target: iqn.x, portal: 10.0.0.1,3260].")
		fmt.Fprintln(os.Stderr, "iscsiadm: node.session.auth.password = helper-Secret-42")
		fmt.Fprintln(os.Stderr, "iscsiadm: initiator reported error (24 - iSCSI login failed due to authorization failure)")
		os.Exit(24)
	case "hang":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(3)
}

const (
	iqnData = "iqn.2024-01.io.example:data"
	iqnLogs = "iqn.2024-01.io.example:logs"
	chapPw  = "Chap-s3cret-one"
	chapIn  = "Mutual-s3cret-two"
)

var (
	tData = Target{Portal: "127.0.0.1", IQN: iqnData}
	apLo  = netip.MustParseAddrPort("127.0.0.1:3260")
)

type env struct {
	c *Client
	f *fakeIscsiadm
	k *fakeKernel
}

func newEnv(t *testing.T) *env {
	k := newFakeKernel(t)
	f := newFakeIscsiadm(t, k)
	return &env{c: &Client{SysRoot: k.sys, DevRoot: k.dev, NodeDB: f.db, Runner: f, Timeout: 5 * time.Second}, f: f, k: k}
}

func (e *env) serve(t Target, tg *fakeTarget) { e.f.targets[t.Key()] = tg }

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(p, []byte(content+"\n"), 0o600))
	return p
}

// argvWithout fails if any recorded argv holds one of the secrets.
func argvWithout(t *testing.T, calls [][]string, secrets ...string) {
	t.Helper()
	for _, argv := range calls {
		for _, s := range secrets {
			if strings.Contains(strings.Join(argv, "\x00"), s) {
				t.Fatalf("secret in argv: iscsiadm %v", argv)
			}
		}
	}
}

// messages lists the message of err and of everything it wraps.
func messages(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error()}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, messages(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, messages(e)...)
		}
	}
	return out
}

func hasCall(calls [][]string, want ...string) bool {
	return slices.ContainsFunc(calls, func(c []string) bool { return slices.Equal(c, want) })
}

// onlyCalls fails unless the fake saw exactly these calls, in order.
func onlyCalls(t *testing.T, f *fakeIscsiadm, want ...[]string) {
	t.Helper()
	if calls := f.Calls(); !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("iscsiadm calls %v, want %v", calls, want)
	}
}

func TestTargetPortalsAndNames(t *testing.T) {
	for _, c := range []struct{ portal, key string }{
		{"127.0.0.1", iqnData + "@127.0.0.1:3260"},
		{"127.0.0.1:3261", iqnData + "@127.0.0.1:3261"},
		{"::ffff:192.0.2.1", iqnData + "@192.0.2.1:3260"},
		{"[2001:db8::1]:3260", iqnData + "@[2001:db8::1]:3260"},
		{"[2001:DB8:0::1]", iqnData + "@[2001:db8::1]:3260"},
	} {
		tg := Target{Portal: c.portal, IQN: iqnData}
		if err := tg.Validate(); err != nil || tg.Key() != c.key {
			t.Errorf("%q: key %q, err %v; want %q", c.portal, tg.Key(), err, c.key)
		}
	}
	if got := Identity(tData, 3); got != "iscsi:iqn.2024-01.io.example:data@127.0.0.1:3260:lun3" {
		t.Errorf("Identity = %q", got)
	}
	for _, c := range []struct {
		tg   Target
		want string
	}{
		{Target{Portal: "storage.example", IQN: iqnData}, "host names are not accepted"},
		{Target{Portal: "10.0.0.1:0", IQN: iqnData}, "port 0"},
		{Target{Portal: "", IQN: iqnData}, "portal is empty"},
		{Target{Portal: "10.0.0.1", IQN: "iqn.2024-01.io.example/../../etc"}, `character '/'`},
		{Target{Portal: "10.0.0.1", IQN: "iqn.2024-01.io.example: data"}, `character ' '`},
		{Target{Portal: "10.0.0.1", IQN: "data"}, `must start with "iqn."`},
		{Target{Portal: "10.0.0.1", IQN: "iqn." + strings.Repeat("a", 220)}, "longer than 223"},
	} {
		if err := c.tg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.tg, err, c.want)
		}
	}
	if !(Target{Portal: "127.0.0.1:3260", IQN: iqnData}).same(tData) || tData.same(Target{Portal: "127.0.0.1:3261", IQN: iqnData}) {
		t.Error("same() does not compare canonical portals")
	}
}

func TestSessionsAndFindFromSysfs(t *testing.T) {
	e := newEnv(t)
	if ss, err := e.c.Sessions(); err != nil || len(ss) != 0 {
		t.Fatalf("empty sysfs: %v, %v", ss, err)
	}
	s1 := e.k.addSession(iqnData, apLo, "default", "iqn.1993-08.org.debian:01:host")
	e.k.addLUN(s1, 0, 2048)
	sdc := e.k.addLUN(s1, 1, 4096)
	v6 := netip.MustParseAddrPort("[2001:db8::7]:3260")
	s2 := e.k.addSession(iqnLogs, v6, "volumed-x", "iqn.2024-01.io.example:other")
	e.k.addLUN(s2, 0, 8)

	ss, err := e.c.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	want := []Session{
		{ID: 1, Target: Target{Portal: "127.0.0.1:3260", IQN: iqnData}, TPGT: 1, Iface: "default", InitiatorName: "iqn.1993-08.org.debian:01:host", State: "LOGGED_IN", ReplacementTimeout: 120 * time.Second, Host: 2},
		{ID: 2, Target: Target{Portal: "[2001:db8::7]:3260", IQN: iqnLogs}, TPGT: 1, Iface: "volumed-x", InitiatorName: "iqn.2024-01.io.example:other", State: "LOGGED_IN", ReplacementTimeout: 120 * time.Second, Host: 3},
	}
	if !slices.Equal(ss, want) {
		t.Fatalf("Sessions:\n got %+v\nwant %+v", ss, want)
	}

	d, ok, err := e.c.Find(tData, 1)
	if err != nil || !ok {
		t.Fatalf("Find LUN 1: %v %v", ok, err)
	}
	if d.Device != filepath.Join(e.k.dev, sdc) || d.SizeBytes != 4096*512 || d.HCTL != "2:0:0:1" || d.SessionID != 1 || d.LUN != 1 || d.Target != want[0].Target {
		t.Fatalf("Find LUN 1 = %+v", d)
	}
	if _, ok, _ := e.c.Find(tData, 7); ok {
		t.Fatal("found a LUN the session does not have")
	}
	if _, ok, _ := e.c.Find(Target{Portal: "[2001:db8:0::7]", IQN: iqnLogs}, 0); !ok {
		t.Fatal("IPv6 target not found under another spelling of its portal")
	}
	if _, ok, _ := e.c.Find(Target{Portal: "127.0.0.1", IQN: iqnLogs}, 0); ok {
		t.Fatal("found a LUN through another target's session")
	}

	// The /dev node must exist and be the device sysfs names.
	must(t, os.Remove(d.Device))
	if _, ok, _ := e.c.Find(tData, 1); ok {
		t.Fatal("found a LUN whose /dev node is missing")
	}
	e.k.setDev(s1, 1, fakeMajor, 16)                                                                // sysfs and /dev agree again
	writeFile(t, filepath.Join(e.k.blockDir(s1, 1), "dev"), fmt.Sprintf("%d:%d\n", fakeMajor, 200)) // sysfs moves on
	if _, ok, _ := e.c.Find(tData, 1); ok {
		t.Fatal("accepted a stale /dev node for another device")
	}
}

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

func TestLogoutOnlyThatTarget(t *testing.T) {
	e := newEnv(t)
	other := netip.MustParseAddrPort("127.0.0.1:3261")
	for _, tg := range []Target{tData, {Portal: "127.0.0.1", IQN: iqnLogs}, {Portal: other.String(), IQN: iqnData}} {
		e.serve(tg, &fakeTarget{luns: map[int]int64{0: 8}})
		if _, err := e.c.Login(context.Background(), Options{Target: tg}); err != nil {
			t.Fatal(err)
		}
	}
	e.f.resetCalls()
	if err := e.c.Logout(context.Background(), Target{Portal: "127.0.0.1:3260", IQN: iqnData}); err != nil {
		t.Fatal(err)
	}
	onlyCalls(t, e.f,
		[]string{"-m", "session", "-r", "1", "--logout"},
		[]string{"-m", "node", "-T", iqnData, "-p", "127.0.0.1:3260", "-o", "delete"})
	if ids := e.k.sessionIDs(); !slices.Equal(ids, []int{2, 3}) {
		t.Fatalf("sessions left %v, want 2 and 3", ids)
	}
	if _, err := os.Stat(filepath.Join(e.f.db, iqnData, "127.0.0.1,3260")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("node record of the logged out target: %v", err)
	}
	for _, p := range []string{filepath.Join(iqnData, "127.0.0.1,3261"), filepath.Join(iqnLogs, "127.0.0.1,3260")} {
		if _, err := os.Stat(filepath.Join(e.f.db, p)); err != nil {
			t.Fatalf("other target's record: %v", err)
		}
	}
	// Nothing left to do is not an error.
	if err := e.c.Logout(context.Background(), tData); err != nil {
		t.Fatalf("second logout: %v", err)
	}
}

func TestLogoutRefusesDiskInUse(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		e := newEnv(t)
		sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
		e.k.addLUN(sid, 0, 8)
		must(t, os.Mkdir(filepath.Join(e.k.blockDir(sid, 0), "holders", "dm-0"), 0o755))
		err := e.c.Logout(context.Background(), tData)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "dm-0") {
			t.Fatalf("err = %v, want ErrBusy naming dm-0", err)
		}
		onlyCalls(t, e.f) // nothing may run on a busy target
	})
	t.Run("mounted", func(t *testing.T) {
		mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/"))
		if err != nil || len(mounts) == 0 {
			t.Fatalf("mountinfo for /: %v", err)
		}
		e := newEnv(t)
		sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
		e.k.addLUN(sid, 0, 8)
		// Give the fixture disk the device number of the mounted root.
		e.k.setDev(sid, 0, uint32(mounts[0].Major), uint32(mounts[0].Minor))
		err = e.c.Logout(context.Background(), tData)
		if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "mounted at /") {
			t.Fatalf("err = %v, want ErrBusy: mounted at /", err)
		}
		if ids := e.k.sessionIDs(); len(ids) != 1 {
			t.Fatal("logged out a mounted disk")
		}
	})
}

func TestExitStatusMapping(t *testing.T) {
	for _, c := range []struct {
		code int
		is   error
		name string
	}{
		{24, ErrAuthFailed, "ISCSI_ERR_LOGIN_AUTH_FAILED"},
		{8, ErrTimeout, "ISCSI_ERR_TRANS_TIMEOUT"},
		{11, ErrTimeout, "ISCSI_ERR_PDU_TIMEOUT"},
		{15, ErrSessionExists, "ISCSI_ERR_SESS_EXISTS"},
		{21, ErrNotFound, "ISCSI_ERR_NO_OBJS_FOUND"},
		{2, ErrNotFound, "ISCSI_ERR_SESS_NOT_FOUND"},
		{20, ErrDaemon, "ISCSI_ERR_ISCSID_NOTCONN"},
		{4, ErrConnect, "ISCSI_ERR_TRANS"},
		{19, ErrLogin, "ISCSI_ERR_FATAL_LOGIN"},
		{28, ErrBusy, "ISCSI_ERR_BUSY"},
		{12, nil, "ISCSI_ERR_TRANS_NOT_FOUND"},
		{99, nil, "exit status 99"},
	} {
		e := newEnv(t)
		e.f.hook = func(context.Context, []string) (bool, []byte, []byte, error) {
			return true, nil, []byte("iscsiadm: something\niscsiadm: went wrong\n"), fakeExit(c.code)
		}
		_, err := e.c.iscsiadm(context.Background(), nil, "-m", "session")
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != c.code || !strings.Contains(err.Error(), c.name) ||
			!strings.Contains(err.Error(), "something; iscsiadm: went wrong") {
			t.Errorf("exit %d: %v", c.code, err)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("exit %d: %v is not %v", c.code, err, c.is)
		}
		for _, other := range []error{ErrAuthFailed, ErrTimeout, ErrSessionExists, ErrNotFound, ErrDaemon, ErrConnect, ErrLogin, ErrBusy} {
			if other != c.is && errors.Is(err, other) {
				t.Errorf("exit %d also matches %v", c.code, other)
			}
		}
	}
}

func TestTimeoutsHonoured(t *testing.T) {
	block := func(ctx context.Context, _ []string) (bool, []byte, []byte, error) {
		<-ctx.Done()
		return true, nil, nil, ctx.Err()
	}
	t.Run("per call", func(t *testing.T) {
		e := newEnv(t)
		e.c.Timeout = 50 * time.Millisecond
		e.f.hook = block
		_, err := e.c.Login(context.Background(), Options{Target: tData})
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 50ms") {
			t.Fatalf("err = %v, want a timeout of the call", err)
		}
	})
	t.Run("caller's context", func(t *testing.T) {
		e := newEnv(t)
		ctx, cancel := context.WithCancel(context.Background())
		e.f.hook = func(c context.Context, args []string) (bool, []byte, []byte, error) {
			cancel()
			return block(c, args)
		}
		_, err := e.c.Login(ctx, Options{Target: tData})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("LUN wait", func(t *testing.T) {
		e := newEnv(t)
		e.serve(tData, &fakeTarget{luns: map[int]int64{0: 8}})
		sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
		e.k.addLUN(sid, 0, 8)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := e.c.Login(ctx, Options{Target: tData, LUN: 5})
		if !errors.Is(err, ErrLUNNotFound) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "session 1 has LUNs 0") {
			t.Fatalf("err = %v, want LUN 5 not found, naming LUN 0", err)
		}
		if ids := e.k.sessionIDs(); len(ids) != 1 {
			t.Fatal("logged out a session this Login did not create")
		}
	})
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

func TestRescan(t *testing.T) {
	e := newEnv(t)
	if err := e.c.Rescan(context.Background(), tData); !errors.Is(err, ErrNoSession) {
		t.Fatalf("err = %v, want ErrNoSession", err)
	}
	sid := e.k.addSession(iqnData, apLo, "default", "iqn.x:host")
	e.k.addSession(iqnLogs, apLo, "default", "iqn.x:host")
	if err := e.c.Rescan(context.Background(), tData); err != nil {
		t.Fatal(err)
	}
	onlyCalls(t, e.f, []string{"-m", "session", "-r", fmt.Sprint(sid), "--rescan"})
}

func TestOrphans(t *testing.T) {
	a := Target{Portal: "10.0.0.1:3260", IQN: iqnData}
	b := Target{Portal: "10.0.0.2:3260", IQN: iqnLogs}
	admin := Target{Portal: "10.0.0.3:3260", IQN: "iqn.2024-01.io.example:admin"}
	sessions := []Session{{ID: 1, Target: a}, {ID: 2, Target: b}, {ID: 3, Target: admin}, {ID: 4, Target: b}}
	got := Orphans(sessions, []Target{{Portal: "10.0.0.1", IQN: iqnData}, b}, []Target{a})
	if !slices.Equal(got, []Target{b}) {
		t.Fatalf("Orphans = %v, want only %v (the admin's session is not ours, a is still wanted)", got, b)
	}
}

func TestExecRunnerRealProcess(t *testing.T) {
	c := &Client{Runner: ExecRunner{Path: os.Args[0]}, Timeout: 5 * time.Second}
	t.Setenv(helperEnv, "auth-failure")
	_, err := c.iscsiadm(context.Background(), []string{"helper-Secret-42"}, "-m", "node", "--login")
	if !errors.Is(err, ErrAuthFailed) || strings.Contains(err.Error(), "helper-Secret-42") || !strings.Contains(err.Error(), "[redacted]") {
		t.Fatalf("err = %v, want a redacted auth failure", err)
	}

	t.Setenv(helperEnv, "hang")
	c.Timeout = 100 * time.Millisecond
	if _, err := c.iscsiadm(context.Background(), nil, "-m", "session"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout from a hung iscsiadm", err)
	}

	c.Runner = ExecRunner{Path: filepath.Join(t.TempDir(), "iscsiadm")}
	if _, err := c.iscsiadm(context.Background(), nil, "-m", "session"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want a missing iscsiadm", err)
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
