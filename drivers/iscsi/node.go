package iscsi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/secret"
)

// Node record keys. The auth keys are written by writeCredentials, every
// other one through iscsiadm -o update.
const (
	keyAuthMethod = "node.session.auth.authmethod"
	keyUsername   = "node.session.auth.username"
	keyPassword   = "node.session.auth.password"
	keyUsernameIn = "node.session.auth.username_in"
	keyPasswordIn = "node.session.auth.password_in"

	keyIfaceInitiator = "iface.initiatorname"
	keyIfaceTransport = "iface.transport_name"

	beginRecord = "# BEGIN RECORD"
	endRecord   = "# END RECORD"
	// emptyValue is how iscsiadm -o show prints an unset value.
	emptyValue = "<empty>"
	// maxValue is open-iscsi's VALUE_MAXVAL less its NUL: longer values
	// are cut when iscsiadm reads the record.
	maxValue = 255
	// maxRecord bounds how much of a node record file is read.
	maxRecord = 1 << 20
)

// authKeys are the keys writeCredentials owns, in the order it writes them.
var authKeys = []string{keyAuthMethod, keyUsername, keyPassword, keyUsernameIn, keyPasswordIn}

// defaultNodeDBs are where distributions build open-iscsi's node database.
var defaultNodeDBs = []string{"/etc/iscsi/nodes", "/var/lib/iscsi/nodes"}

// credentials are a login's auth settings as node record values.
type credentials struct {
	method                                     string // "None" or "CHAP"
	username, password, usernameIn, passwordIn string
}

func (cr credentials) values() map[string]string {
	return map[string]string{
		keyAuthMethod: cr.method,
		keyUsername:   cr.username,
		keyPassword:   cr.password,
		keyUsernameIn: cr.usernameIn,
		keyPasswordIn: cr.passwordIn,
	}
}

// secrets lists what must be redacted from errors of this login.
func (cr credentials) secrets() []string { return []string{cr.password, cr.passwordIn} }

// loadCredentials reads the CHAP secrets and checks everything open-iscsi
// would silently mangle or refuse.
func loadCredentials(ch *CHAP) (credentials, error) {
	if ch == nil {
		return credentials{method: "None"}, nil
	}
	cr := credentials{method: "CHAP", username: ch.Username, usernameIn: ch.MutualUsername}
	if err := checkValue("chap username", ch.Username); err != nil {
		return credentials{}, err
	}
	if ch.PasswordFile == "" {
		return credentials{}, errors.New("chap passwordFile is empty")
	}
	pw, err := readPassword("chap passwordFile", ch.PasswordFile)
	if err != nil {
		return credentials{}, err
	}
	cr.password = pw
	if (ch.MutualUsername == "") != (ch.MutualPasswordFile == "") {
		return credentials{}, errors.New("mutual chap needs both mutualUsername and mutualPasswordFile")
	}
	if ch.MutualUsername != "" {
		if err := checkValue("chap mutualUsername", ch.MutualUsername); err != nil {
			return credentials{}, err
		}
		in, err := readPassword("chap mutualPasswordFile", ch.MutualPasswordFile)
		if err != nil {
			return credentials{}, err
		}
		// RFC 3720 8.2.1: a secret must not authenticate both directions;
		// iscsid refuses the login ("Local password same as remote").
		if in == pw {
			return credentials{}, fmt.Errorf("chap mutualPasswordFile %s holds the same secret as passwordFile %s; mutual CHAP needs two different secrets", ch.MutualPasswordFile, ch.PasswordFile)
		}
		cr.passwordIn = in
	}
	return cr, nil
}

func readPassword(field, path string) (string, error) {
	v, err := secret.Read(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if err := checkValue(field+" "+path+": the secret", v.Reveal()); err != nil {
		return "", err
	}
	return v.Reveal(), nil
}

// checkValue refuses what open-iscsi's "name = value" records cannot carry
// intact: it trims surrounding white space, ends values at a newline and
// cuts them at 255 bytes. Messages never include the value.
func checkValue(what, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is empty", what)
	case len(v) > maxValue:
		return fmt.Errorf("%s is longer than %d bytes", what, maxValue)
	case strings.TrimSpace(v) != v:
		return fmt.Errorf("%s starts or ends with white space, which open-iscsi drops", what)
	case v == emptyValue:
		return fmt.Errorf("%s is %q, which iscsiadm prints for an unset value", what, emptyValue)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s contains a control character", what)
		}
	}
	return nil
}

// nodeArgs are the arguments naming one node record.
func nodeArgs(t Target, iface string) []string {
	return []string{"-m", "node", "-T", t.IQN, "-p", t.portal(), "-I", iface}
}

// ensureNode makes the node record for o what o asks for: created when
// missing, its non-secret parameters set with iscsiadm -o update, its
// credentials written by writeCredentials, and then read back through
// iscsiadm itself, so a record that iscsiadm would read differently from
// what we meant is an error here rather than a wrong login later.
func (c *Client) ensureNode(ctx context.Context, o Options, iface string, cr credentials) error {
	secrets := cr.secrets()
	recs, err := c.showNode(ctx, o.Target, iface, secrets)
	if errors.Is(err, ErrNotFound) {
		// Only when missing: -o new on an existing record resets it to
		// iscsid.conf's defaults.
		if _, err := c.iscsiadm(ctx, secrets, append(nodeArgs(o.Target, iface), "-o", "new")...); err != nil {
			return err
		}
		recs, err = c.showNode(ctx, o.Target, iface, secrets)
	}
	if err != nil {
		return err
	}
	params := nodeParams(o)
	changed := false
	for _, p := range params {
		if allHave(recs, p[0], p[1]) {
			continue
		}
		args := append(nodeArgs(o.Target, iface), "-o", "update", "-n", p[0], "-v", p[1])
		if _, err := c.iscsiadm(ctx, secrets, args...); err != nil {
			return err
		}
		changed = true
	}
	want := cr.values()
	credsOK := true
	for _, k := range authKeys {
		credsOK = credsOK && allHave(recs, k, want[k])
	}
	if !credsOK {
		if err := c.writeCredentials(o.Target, iface, cr); err != nil {
			return err
		}
		changed = true
	}
	if !changed {
		return nil
	}
	recs, err = c.showNode(ctx, o.Target, iface, secrets)
	if err != nil {
		return err
	}
	for _, p := range params {
		if !allHave(recs, p[0], p[1]) {
			return fmt.Errorf("node record %s: iscsiadm shows %s = %q after setting it to %q", o.Target, p[0], firstValue(recs, p[0]), p[1])
		}
	}
	for _, k := range authKeys {
		if !allHave(recs, k, want[k]) {
			return fmt.Errorf("node record %s: iscsiadm does not read back the %s written to its node database (changed meanwhile, or is open-iscsi built with another database root? set Client.NodeDB)", o.Target, k)
		}
	}
	return nil
}

// nodeParams are the record's non-secret settings. node.startup=manual
// keeps open-iscsi's boot service from logging in to our targets behind
// the agent's back. One login attempt of 15 s (initial_login_retry_max 1
// x login_timeout 15) keeps iscsiadm --login well inside the per-call
// timeout, so a dead portal gives iscsiadm's own clear error instead of a
// killed process, and the agent's backoff does the retrying.
func nodeParams(o Options) [][2]string {
	return [][2]string{
		{"node.startup", "manual"},
		{"node.session.timeo.replacement_timeout", o.replacementSeconds()},
		{"node.conn[0].timeo.login_timeout", "15"},
		{"node.session.initial_login_retry_max", "1"},
	}
}

// showNode returns the matching records with secrets shown (-S): the
// output goes through a pipe to us only, and is never put in an error.
func (c *Client) showNode(ctx context.Context, t Target, iface string, secrets []string) ([]map[string]string, error) {
	out, err := c.iscsiadm(ctx, secrets, append(nodeArgs(t, iface), "-o", "show", "-S")...)
	if err != nil {
		return nil, err
	}
	recs := parseRecords(out)
	if len(recs) == 0 {
		return nil, fmt.Errorf("node record %s: iscsiadm -o show printed no record", t)
	}
	return recs, nil
}

func allHave(recs []map[string]string, k, v string) bool {
	for _, r := range recs {
		if r[k] != v {
			return false
		}
	}
	return true
}

func firstValue(recs []map[string]string, k string) string {
	if len(recs) == 0 {
		return ""
	}
	return recs[0][k]
}

// writeCredentials puts the auth settings into the node record file
// itself, because that is the only way to hand open-iscsi a CHAP secret
// without an argument vector:
//
//   - iscsiadm -o update -n node.session.auth.password -v SECRET puts the
//     secret in argv, readable by every local user in /proc/PID/cmdline
//     and `ps` for the life of the process, and kept for good by execve
//     auditing (auditd EXECVE records log argv verbatim).
//   - iscsiadm reads nothing from stdin, and no environment variable or
//     option points it at another config file for one record.
//   - iscsid gets the secret from iscsiadm over its IPC socket, in a
//     struct whose layout changes between versions; speaking it ourselves
//     would be far more fragile than a text file.
//
// The record is open-iscsi's own "name = value" text file, so iscsiadm
// creates it (-o new) and sets every other parameter; this function only
// replaces the five node.session.auth.* lines, writes the file with mode
// 0600 (iscsiadm creates 0644 under 0600 directories) through a temporary
// file and rename, and ensureNode then reads the record back with
// iscsiadm -o show -S and compares, so a database in an unexpected place
// or layout is caught before any login. The secret is on disk here only
// as long as open-iscsi would keep it there anyway: iscsiadm itself stores
// it in the same record. Logout deletes the record.
//
// Records are found under the node DB as iscsiadm lays them out: the
// current layout <db>/<iqn>/<ip>,<port>,<tpgt>/<iface>, and the old one,
// where <db>/<iqn>/<ip>,<port> is the record file.
func (c *Client) writeCredentials(t Target, iface string, cr credentials) error {
	for _, k := range []string{keyUsername, keyUsernameIn} {
		if v := cr.values()[k]; v != "" {
			if err := checkValue(k, v); err != nil {
				return err
			}
		}
	}
	dir, files, err := c.recordFiles(t, iface)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := patchFile(dir, f, cr.values()); err != nil {
			return fmt.Errorf("node record %s: %w", f, err)
		}
	}
	return nil
}

// recordFiles finds the record files of t through iface and the
// directory of the target they sit under.
func (c *Client) recordFiles(t Target, iface string) (string, []string, error) {
	roots := defaultNodeDBs
	if c.NodeDB != "" {
		roots = []string{c.NodeDB}
	}
	ap, err := parsePortal(t.Portal)
	if err != nil {
		return "", nil, err
	}
	for _, root := range roots {
		dir := filepath.Join(root, t.IQN)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		var files []string
		for _, e := range entries {
			addr, port, hasTPGT, ok := parsePortalDir(e.Name())
			if !ok || addr != ap.Addr() || port != ap.Port() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if !hasTPGT {
				if e.Type().IsRegular() {
					files = append(files, p)
				}
				continue
			}
			if !e.IsDir() {
				continue
			}
			f := filepath.Join(p, iface)
			if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
				files = append(files, f)
			}
		}
		if len(files) > 0 {
			return dir, files, nil
		}
	}
	return "", nil, fmt.Errorf("no node record file for %s (iface %s) under %s; is open-iscsi built with another node database (set Client.NodeDB)?", t, iface, strings.Join(roots, " or "))
}

// patchFile rewrites one record file with the auth values replaced. The
// temporary file lives in the target's directory, where iscsiadm only
// looks at names with a comma, so a concurrent iscsiadm never reads it as
// a record.
func patchFile(dir, path string, want map[string]string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	old, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	f.Close()
	if err != nil {
		return err
	}
	if len(old) > maxRecord {
		return fmt.Errorf("larger than %d bytes", maxRecord)
	}
	patched, err := patchRecord(old, want)
	if err != nil {
		return err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".volumed-"+hex.EncodeToString(rnd[:]))
	tf, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = tf.Write(patched)
	if err == nil {
		err = tf.Sync()
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// patchRecord replaces the lines of the keys in want (dropping those whose
// value is empty, as iscsiadm does when it writes a record) and keeps every
// other line as it was. It reads keys the way iscsiadm does, so a line it
// would take as one of these keys cannot survive beside ours.
func patchRecord(rec []byte, want map[string]string) ([]byte, error) {
	for k, v := range want {
		if v != "" && (strings.ContainsAny(v, "\n\r\x00") || len(v) > maxValue || strings.TrimSpace(v) != v) {
			return nil, fmt.Errorf("value of %s cannot be stored in a node record", k)
		}
	}
	lines := strings.SplitAfter(string(rec), "\n")
	var out strings.Builder
	begun, inserted := false, false
	insert := func() {
		for _, k := range authKeys {
			if v := want[k]; v != "" {
				out.WriteString(k + " = " + v + "\n")
			}
		}
		inserted = true
	}
	for _, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, beginRecord):
			if begun {
				return nil, errors.New("more than one record in the file")
			}
			begun = true
		case begun && !inserted && strings.HasPrefix(trimmed, endRecord):
			insert()
		}
		if k, _, ok := recordLine(trimmed); ok {
			if _, managed := want[k]; managed {
				continue
			}
		}
		if line != "" && !strings.HasSuffix(line, "\n") {
			line += "\n"
		}
		out.WriteString(line)
	}
	if !begun {
		return nil, errors.New("not an open-iscsi node record (no " + beginRecord + " line)")
	}
	if !inserted {
		insert()
	}
	return []byte(out.String()), nil
}

// parseRecords parses iscsiadm's record format (node records, -o show
// output, iface records): records between "# BEGIN RECORD" and "# END
// RECORD" lines, "name = value" lines within, "<empty>" for unset values;
// a later line for the same name wins, as in iscsiadm.
func parseRecords(out []byte) []map[string]string {
	var recs []map[string]string
	var cur map[string]string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, beginRecord):
			cur = make(map[string]string)
			recs = append(recs, cur)
			continue
		case strings.HasPrefix(line, endRecord):
			cur = nil
			continue
		}
		if cur == nil {
			continue
		}
		if k, v, ok := recordLine(line); ok {
			if v == emptyValue {
				v = ""
			}
			cur[k] = v
		}
	}
	return recs
}

// recordLine splits a trimmed "name = value" line as iscsiadm's
// idbm_recinfo_config does: the name ends at white space or '=', then '='
// with optional white space around it; comments and lines without a value
// are not settings.
func recordLine(line string) (key, value string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", false
	}
	i := strings.IndexFunc(line, func(r rune) bool { return r == '=' || isSpace(r) })
	if i <= 0 {
		return "", "", false
	}
	key, rest := line[:i], strings.TrimLeftFunc(line[i:], isSpace)
	if !strings.HasPrefix(rest, "=") {
		return "", "", false
	}
	value = strings.TrimLeftFunc(rest[1:], isSpace)
	if value == "" {
		return "", "", false
	}
	return key, value, true
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\v' || r == '\f' || r == '\r'
}

// parsePortalDir parses a node DB portal entry, "10.0.0.1,3260,1" (a
// directory of per-iface records) or "10.0.0.1,3260" (the old layout, the
// record itself). IPv6 addresses carry no brackets there.
func parsePortalDir(name string) (addr netip.Addr, port uint16, hasTPGT bool, ok bool) {
	parts := strings.Split(name, ",")
	if len(parts) != 2 && len(parts) != 3 {
		return netip.Addr{}, 0, false, false
	}
	if len(parts) == 3 {
		s := strings.TrimPrefix(parts[2], "-")
		if _, ok := parseSmall(s); !ok {
			return netip.Addr{}, 0, false, false
		}
	}
	a, err := netip.ParseAddr(parts[0])
	if err != nil {
		return netip.Addr{}, 0, false, false
	}
	a = a.Unmap()
	p, ok := parseSmall(parts[1])
	if !ok || p == 0 || p > 65535 {
		return netip.Addr{}, 0, false, false
	}
	return a, uint16(p), len(parts) == 3, true
}

// ifaceName is the iscsiadm iface carrying a custom initiator name: one
// per name, so a name always gets the same iface and two names never
// share one.
func ifaceName(initiator string) string {
	if initiator == "" {
		return defaultIface
	}
	sum := sha256.Sum256([]byte(initiator))
	return "volumed-" + hex.EncodeToString(sum[:8])
}

// ensureIface makes the iface for the initiator name and returns its name.
// An existing iface is only updated when it differs: iscsiadm -o new would
// reset it, and both refuse (exit 15) while a session uses it.
func (c *Client) ensureIface(ctx context.Context, initiator string) (string, error) {
	name := ifaceName(initiator)
	if name == defaultIface {
		return name, nil
	}
	op := func(args ...string) ([]map[string]string, error) {
		out, err := c.iscsiadm(ctx, nil, append([]string{"-m", "iface", "-I", name, "-o"}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("iface %s for initiator %s: %w", name, initiator, err)
		}
		return parseRecords(out), nil
	}
	// A missing iface fails show (exit 6 with 2.1.8); any failure means
	// "create it", and creating is what reports a real problem.
	recs, err := op("show")
	if err != nil || len(recs) == 0 {
		if _, err := op("new"); err != nil {
			return "", err
		}
		if recs, err = op("show"); err != nil {
			return "", err
		}
	}
	for _, p := range [][2]string{{keyIfaceTransport, "tcp"}, {keyIfaceInitiator, initiator}} {
		if len(recs) > 0 && allHave(recs, p[0], p[1]) {
			continue
		}
		if _, err := op("update", "-n", p[0], "-v", p[1]); err != nil {
			return "", err
		}
	}
	return name, nil
}

// deleteNode removes the node records of t (every iface). A missing record
// is not an error.
func (c *Client) deleteNode(ctx context.Context, t Target) error {
	_, err := c.iscsiadm(ctx, nil, "-m", "node", "-T", t.IQN, "-p", t.portal(), "-o", "delete")
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
