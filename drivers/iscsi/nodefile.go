// Editing node record files directly, so CHAP secrets never pass through iscsiadm's argv.

package iscsi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/durable"
)

// authKeys are the keys writeCredentials owns, in the order it writes them.
var authKeys = []string{keyAuthMethod, keyUsername, keyPassword, keyUsernameIn, keyPasswordIn}

// defaultNodeDBs are where distributions build open-iscsi's node database.
var defaultNodeDBs = []string{"/etc/iscsi/nodes", "/var/lib/iscsi/nodes"}

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
	return durable.WriteFileVia(dir, path, patched, 0o600)
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
