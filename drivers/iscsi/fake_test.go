package iscsi

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// This machine's kernel has no SCSI or iSCSI, so the tests fake exactly
// the iscsiadm/iscsid/kernel boundary: fakeIscsiadm stands in for the
// iscsiadm binary (with iscsid and a target behind it) and fakeKernel for
// the sysfs entries and /dev nodes the kernel creates for a session. The
// package's own code - sysfs reading, node record patching, error mapping
// - runs unchanged against them. The real flow is tested in the VM.

// fakeKernel builds sysfs fixtures mirroring Linux 6.x under sys and
// block device nodes under dev.
type fakeKernel struct {
	t        *testing.T
	sys, dev string
	nextSID  int
	nextHost int
	nextDisk int
	sessions map[int]*fakeSession
}

type fakeSession struct {
	id, host int
	iqn      string
	ap       netip.AddrPort
	luns     map[int]string // LUN -> block device name
}

// fakeMajor is in Linux's "local/experimental use" range, so a fixture
// device number never equals a real mounted device's by accident.
const fakeMajor = 240

func newFakeKernel(t *testing.T) *fakeKernel {
	root := t.TempDir()
	k := &fakeKernel{t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev"), nextSID: 1, nextHost: 2, sessions: map[int]*fakeSession{}}
	for _, d := range []string{k.dev, filepath.Join(k.sys, classSession), filepath.Join(k.sys, classConnection)} {
		must(t, os.MkdirAll(d, 0o755))
	}
	return k
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(content), 0o644))
}

func (k *fakeKernel) base(s *fakeSession) string {
	return filepath.Join(k.sys, "devices/platform", fmt.Sprintf("host%d/session%d", s.host, s.id))
}

// addSession creates a logged-in session the way the kernel lays it out.
func (k *fakeKernel) addSession(iqn string, ap netip.AddrPort, iface, initiator string) int {
	t := k.t
	s := &fakeSession{id: k.nextSID, host: k.nextHost, iqn: iqn, ap: ap, luns: map[int]string{}}
	k.nextSID++
	k.nextHost++
	k.sessions[s.id] = s
	sid, host := strconv.Itoa(s.id), strconv.Itoa(s.host)
	sess := filepath.Join(k.base(s), "iscsi_session", "session"+sid)
	for name, v := range map[string]string{
		"targetname": iqn, "tpgt": "1", "ifacename": iface, "initiatorname": initiator,
		"state": "LOGGED_IN", "recovery_tmo": "120", "username": "(null)", "password": "(null)",
	} {
		writeFile(t, filepath.Join(sess, name), v+"\n")
	}
	must(t, os.Symlink("../../../session"+sid, filepath.Join(sess, "device")))
	must(t, os.Symlink("../../devices/platform/host"+host+"/session"+sid+"/iscsi_session/session"+sid,
		filepath.Join(k.sys, classSession, "session"+sid)))
	conn := "connection" + sid + ":0"
	cdir := filepath.Join(k.base(s), conn, "iscsi_connection", conn)
	addr := ap.Addr().String()
	for name, v := range map[string]string{
		"persistent_address": addr, "persistent_port": strconv.Itoa(int(ap.Port())),
		"address": addr, "port": strconv.Itoa(int(ap.Port())),
	} {
		writeFile(t, filepath.Join(cdir, name), v+"\n")
	}
	must(t, os.Symlink("../../devices/platform/host"+host+"/session"+sid+"/"+conn+"/iscsi_connection/"+conn,
		filepath.Join(k.sys, classConnection, conn)))
	return s.id
}

// addLUN adds a disk to a session: the SCSI device, its block device in
// sysfs and the /dev node devtmpfs would create.
func (k *fakeKernel) addLUN(sid, lun int, sectors int64) string {
	s := k.sessions[sid]
	name := "sd" + string(rune('b'+k.nextDisk))
	minor := uint32(k.nextDisk * 16)
	k.nextDisk++
	h := strconv.Itoa(s.host)
	block := filepath.Join(k.base(s), "target"+h+":0:0", h+":0:0:"+strconv.Itoa(lun), "block", name)
	writeFile(k.t, filepath.Join(block, "size"), strconv.FormatInt(sectors, 10)+"\n")
	must(k.t, os.MkdirAll(filepath.Join(block, "holders"), 0o755))
	s.luns[lun] = name
	k.setDev(sid, lun, fakeMajor, minor)
	return name
}

// setDev gives a LUN's disk another device number, in sysfs and in /dev.
func (k *fakeKernel) setDev(sid, lun int, major, minor uint32) {
	s := k.sessions[sid]
	writeFile(k.t, filepath.Join(k.blockDir(sid, lun), "dev"), fmt.Sprintf("%d:%d\n", major, minor))
	node := filepath.Join(k.dev, s.luns[lun])
	os.Remove(node)
	must(k.t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))))
}

func (k *fakeKernel) blockDir(sid, lun int) string {
	s := k.sessions[sid]
	h := strconv.Itoa(s.host)
	return filepath.Join(k.base(s), "target"+h+":0:0", h+":0:0:"+strconv.Itoa(lun), "block", s.luns[lun])
}

func (k *fakeKernel) removeSession(sid int) {
	s := k.sessions[sid]
	conn := fmt.Sprintf("connection%d:0", sid)
	must(k.t, os.Remove(filepath.Join(k.sys, classSession, "session"+strconv.Itoa(sid))))
	must(k.t, os.Remove(filepath.Join(k.sys, classConnection, conn)))
	must(k.t, os.RemoveAll(k.base(s)))
	for _, name := range s.luns {
		os.Remove(filepath.Join(k.dev, name))
	}
	delete(k.sessions, sid)
}

func (k *fakeKernel) sessionIDs() []int {
	var ids []int
	for id := range k.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// fakeTarget is what the fake portal serves.
type fakeTarget struct {
	luns           map[int]int64 // LUN -> size in sectors
	user, pass     string        // CHAP the target demands; "" = none
	userIn, passIn string        // the target's own credentials (mutual CHAP)
}

// fakeIscsiadm is the fake iscsiadm binary, with iscsid and the targets
// behind it. Node records are kept in open-iscsi's on-disk format under db,
// so the package's record patching runs against that format: as iscsiadm
// 2.1.8 writes a record made with -o new (<db>/<iqn>/<ip>,<port>, checked
// against the real binary), or with discovered set, as discovery writes
// them (<db>/<iqn>/<ip>,<port>,<tpgt>/<iface>). It records every argv.
type fakeIscsiadm struct {
	t          *testing.T
	k          *fakeKernel
	db         string
	discovered bool

	mu      sync.Mutex
	calls   [][]string
	targets map[string]*fakeTarget // by Target.Key()
	ifaces  map[string]map[string]string
	// hook, when set, answers calls it handles instead of the fake.
	hook func(ctx context.Context, args []string) (handled bool, stdout, stderr []byte, err error)
}

type fakeExit int

func (e fakeExit) Error() string { return "exit status " + strconv.Itoa(int(e)) }
func (e fakeExit) ExitCode() int { return int(e) }

func newFakeIscsiadm(t *testing.T, k *fakeKernel) *fakeIscsiadm {
	return &fakeIscsiadm{t: t, k: k, db: filepath.Join(t.TempDir(), "nodes"), targets: map[string]*fakeTarget{}, ifaces: map[string]map[string]string{}}
}

func (f *fakeIscsiadm) Calls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeIscsiadm) resetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// nodeKeys are the record keys the fake knows, in iscsiadm's order; the
// defaults differ from what the package sets, so every update shows.
var nodeKeys = []struct{ key, def string }{
	{"node.name", ""}, {"node.tpgt", "-1"}, {"node.startup", "automatic"}, {"node.leading_login", "No"},
	{"iface.iscsi_ifacename", ""}, {"iface.transport_name", "tcp"}, {"iface.initiatorname", ""},
	{"node.discovery_type", "static"}, {"node.session.initial_login_retry_max", "8"},
	{keyAuthMethod, "None"}, {keyUsername, ""}, {keyPassword, ""}, {keyUsernameIn, ""}, {keyPasswordIn, ""},
	{"node.session.timeo.replacement_timeout", "15"}, {"node.conn[0].address", ""}, {"node.conn[0].port", ""},
	{"node.conn[0].timeo.login_timeout", "30"},
}

type fakeArgs struct {
	mode, target, portal, iface, op, name, value, sid string
	show, login, logout, rescan                       bool
}

func (f *fakeIscsiadm) Run(ctx context.Context, args []string) ([]byte, []byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, slices.Clone(args))
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if handled, o, e, err := hook(ctx, args); handled {
			return o, e, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var a fakeArgs
	for i := 0; i < len(args); i++ {
		val := func() string {
			i++
			if i >= len(args) {
				f.t.Errorf("iscsiadm %v: %s needs a value", args, args[i-1])
				return ""
			}
			return args[i]
		}
		switch args[i] {
		case "-m":
			a.mode = val()
		case "-T":
			a.target = val()
		case "-p":
			a.portal = val()
		case "-I":
			a.iface = val()
		case "-o":
			a.op = val()
		case "-n":
			a.name = val()
		case "-v":
			a.value = val()
		case "-r":
			a.sid = val()
		case "-S":
			a.show = true
		case "--login":
			a.login = true
		case "--logout":
			a.logout = true
		case "--rescan":
			a.rescan = true
		default:
			f.t.Errorf("iscsiadm %v: unexpected argument %q", args, args[i])
			return nil, []byte("iscsiadm: unrecognized option\n"), fakeExit(7)
		}
	}
	switch a.mode {
	case "node":
		return f.node(a)
	case "session":
		return f.session(a)
	case "iface":
		return f.iface(a)
	}
	f.t.Errorf("iscsiadm %v: unexpected mode", args)
	return nil, nil, fakeExit(7)
}

func fail(code int, format string, args ...any) ([]byte, []byte, error) {
	return nil, []byte("iscsiadm: " + fmt.Sprintf(format, args...) + "\n"), fakeExit(code)
}

func (f *fakeIscsiadm) recordPath(a fakeArgs) string {
	ap, err := netip.ParseAddrPort(a.portal)
	if err != nil {
		f.t.Errorf("portal %q: %v", a.portal, err)
	}
	if f.discovered {
		return filepath.Join(f.db, a.target, fmt.Sprintf("%s,%d,1", ap.Addr(), ap.Port()), a.iface)
	}
	return filepath.Join(f.db, a.target, fmt.Sprintf("%s,%d", ap.Addr(), ap.Port()))
}

func readFakeRecord(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rec := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " = "); ok {
			rec[k] = v
		}
	}
	return rec, nil
}

// writeFakeRecord writes like iscsiadm's fopen("w"): an existing file
// keeps its mode, a new one is 0644 as older iscsiadm versions made them
// (2.1.8 makes them 0600; the package must not depend on it).
func writeFakeRecord(path string, rec map[string]string) error {
	var b strings.Builder
	b.WriteString("# BEGIN RECORD 2.1.8\n")
	for _, k := range nodeKeys {
		if v := rec[k.key]; v != "" {
			b.WriteString(k.key + " = " + v + "\n")
		}
	}
	b.WriteString("# END RECORD\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func (f *fakeIscsiadm) node(a fakeArgs) ([]byte, []byte, error) {
	if a.op == "delete" {
		dir := filepath.Join(f.db, a.target)
		ap, _ := netip.ParseAddrPort(a.portal)
		prefix := fmt.Sprintf("%s,%d", ap.Addr(), ap.Port())
		entries, _ := os.ReadDir(dir)
		found := false
		for _, e := range entries {
			if e.Name() == prefix || strings.HasPrefix(e.Name(), prefix+",") {
				must(f.t, os.RemoveAll(filepath.Join(dir, e.Name())))
				found = true
			}
		}
		if !found {
			return fail(21, "No records found")
		}
		os.Remove(dir)
		return nil, nil, nil
	}
	path := f.recordPath(a)
	rec, err := readFakeRecord(path)
	exists := err == nil
	switch {
	case a.op == "new":
		ifc, ok := f.ifaces[a.iface]
		if !ok && a.iface != "default" {
			return fail(6, "Could not read iface %s. Error 6", a.iface)
		}
		ap, _ := netip.ParseAddrPort(a.portal)
		rec = map[string]string{}
		for _, k := range nodeKeys {
			rec[k.key] = k.def
		}
		rec["node.name"], rec["iface.iscsi_ifacename"] = a.target, a.iface
		rec["node.conn[0].address"], rec["node.conn[0].port"] = ap.Addr().String(), strconv.Itoa(int(ap.Port()))
		rec["iface.initiatorname"] = ifc[keyIfaceInitiator]
		must(f.t, writeFakeRecord(path, rec))
		return []byte("New iSCSI node [tcp:[hw=,ip=,net_if=,iscsi_if=" + a.iface + "] " + a.portal + ",-1 " + a.target + "] added\n"), nil, nil
	case !exists:
		return fail(21, "No records found")
	case a.op == "update":
		if !slices.ContainsFunc(nodeKeys, func(k struct{ key, def string }) bool { return k.key == a.name }) {
			return fail(7, "Cannot modify %s. Invalid param name.", a.name)
		}
		rec[a.name] = a.value
		must(f.t, writeFakeRecord(path, rec))
		return nil, nil, nil
	case a.op == "show":
		var b strings.Builder
		b.WriteString("# BEGIN RECORD 2.1.8\n")
		for _, k := range nodeKeys {
			v := rec[k.key]
			switch {
			case v == "":
				v = "<empty>"
			case (k.key == keyPassword || k.key == keyPasswordIn) && !a.show:
				v = "********"
			}
			b.WriteString(k.key + " = " + v + "\n")
		}
		b.WriteString("# END RECORD\n")
		return []byte(b.String()), nil, nil
	case a.login:
		return f.login(a, rec)
	}
	f.t.Errorf("fake iscsiadm: node op %+v not handled", a)
	return fail(7, "invalid")
}

func (f *fakeIscsiadm) login(a fakeArgs, rec map[string]string) ([]byte, []byte, error) {
	ap, _ := netip.ParseAddrPort(a.portal)
	where := fmt.Sprintf("[iface: %s, target: %s, portal: %s,%d]", a.iface, a.target, ap.Addr(), ap.Port())
	for _, s := range f.k.sessions {
		if s.iqn == a.target && s.ap == ap {
			return fail(15, "default: 1 session requested, but 1 already present.")
		}
	}
	tg := f.targets[Target{Portal: a.portal, IQN: a.target}.Key()]
	if tg == nil {
		return fail(8, "Could not login to %s.\niscsiadm: initiator reported error (8 - connection timed out)\niscsiadm: Could not log into all portals", where)
	}
	authOK := (tg.user == "" || rec[keyAuthMethod] == "CHAP" && rec[keyUsername] == tg.user && rec[keyPassword] == tg.pass) &&
		rec[keyUsernameIn] == tg.userIn && rec[keyPasswordIn] == tg.passIn
	if !authOK {
		// The worst case for redaction: a tool that echoes the record's
		// secret in its diagnostics.
		return []byte("Logging in to " + where + "\n"), []byte(
			"iscsiadm: Could not login to " + where + ".\n" +
				"iscsiadm: initiator reported error (24 - iSCSI login failed due to authorization failure)\n" +
				"iscsiadm: debug: node.session.auth.password = " + rec[keyPassword] + "\n" +
				"iscsiadm: Could not log into all portals\n"), fakeExit(24)
	}
	initiator := rec["iface.initiatorname"]
	if initiator == "" {
		initiator = "iqn.1993-08.org.debian:01:fakehost"
	}
	sid := f.k.addSession(a.target, ap, a.iface, initiator)
	for _, lun := range slices.Sorted(maps.Keys(tg.luns)) {
		f.k.addLUN(sid, lun, tg.luns[lun])
	}
	return []byte("Logging in to " + where + "\nLogin to " + where + " successful.\n"), nil, nil
}

func (f *fakeIscsiadm) session(a fakeArgs) ([]byte, []byte, error) {
	sid, _ := strconv.Atoi(a.sid)
	s := f.k.sessions[sid]
	if s == nil {
		return fail(2, "Could not get session info for sid %s", a.sid)
	}
	switch {
	case a.logout:
		f.k.removeSession(sid)
		return []byte(fmt.Sprintf("Logging out of session [sid: %d, target: %s, portal: %s]\n", sid, s.iqn, s.ap)), nil, nil
	case a.rescan:
		tg := f.targets[Target{Portal: s.ap.String(), IQN: s.iqn}.Key()]
		if tg != nil {
			for _, lun := range slices.Sorted(maps.Keys(tg.luns)) {
				if _, ok := s.luns[lun]; !ok {
					f.k.addLUN(sid, lun, tg.luns[lun])
				}
			}
		}
		return []byte(fmt.Sprintf("Rescanning session [sid: %d, target: %s, portal: %s]\n", sid, s.iqn, s.ap)), nil, nil
	}
	f.t.Errorf("fake iscsiadm: session op %+v not handled", a)
	return fail(7, "invalid")
}

func (f *fakeIscsiadm) iface(a fakeArgs) ([]byte, []byte, error) {
	ifc, ok := f.ifaces[a.iface]
	switch a.op {
	case "show":
		if !ok {
			return fail(6, "Could not read iface %s (6).", a.iface)
		}
		return []byte("# BEGIN RECORD 2.1.8\niface.iscsi_ifacename = " + a.iface + "\niface.transport_name = " + ifc[keyIfaceTransport] +
			"\niface.initiatorname = " + orDefault(ifc[keyIfaceInitiator], "<empty>") + "\n# END RECORD\n"), nil, nil
	case "new":
		for _, s := range f.k.sessions {
			if readAttrOr(filepath.Join(f.k.sys, classSession, "session"+strconv.Itoa(s.id)), "ifacename") == a.iface {
				return fail(15, "Could not create new interface %s.", a.iface)
			}
		}
		f.ifaces[a.iface] = map[string]string{keyIfaceTransport: "tcp"}
		return []byte("New interface " + a.iface + " added\n"), nil, nil
	case "update":
		if !ok {
			return fail(6, "Could not read iface %s (6).", a.iface)
		}
		ifc[a.name] = a.value
		return []byte(a.iface + " updated.\n"), nil, nil
	}
	f.t.Errorf("fake iscsiadm: iface op %+v not handled", a)
	return fail(7, "invalid")
}
