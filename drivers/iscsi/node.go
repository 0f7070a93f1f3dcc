package iscsi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
