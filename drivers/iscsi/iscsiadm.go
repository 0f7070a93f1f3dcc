package iscsi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Runner runs iscsiadm with an argument vector. A failed run returns an
// error with an ExitCode() int method (as *exec.ExitError has) so the exit
// status can be mapped. No secret is ever passed in args; iscsiadm has no
// way to take one on stdin, so there is no stdin either.
type Runner interface {
	Run(ctx context.Context, args []string) (stdout, stderr []byte, err error)
}

// ExecRunner runs the real iscsiadm, without a shell.
type ExecRunner struct {
	Path string // "" = "iscsiadm" from $PATH
}

func (r ExecRunner) Run(ctx context.Context, args []string) ([]byte, []byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, orDefault(r.Path, "iscsiadm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// iscsiadm does not fork, but if something it started kept our pipes
	// open, Wait must not outlive the context by more than this.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// Errors an iscsiadm exit status maps to; test with errors.Is.
var (
	ErrAuthFailed    = errors.New("CHAP authorization failed")
	ErrTimeout       = errors.New("timed out")
	ErrSessionExists = errors.New("session already exists")
	ErrNotFound      = errors.New("no such session or node record")
	ErrDaemon        = errors.New("cannot talk to iscsid (is it running?)")
	ErrConnect       = errors.New("cannot connect to the portal")
	ErrLogin         = errors.New("iSCSI login failed")
	ErrBusy          = errors.New("device or session in use")

	// ErrNoSession: the target has no session (Rescan).
	ErrNoSession = errors.New("no session to the target")
	// ErrLUNNotFound: the session is up but the LUN's block device did
	// not appear in time.
	ErrLUNNotFound = errors.New("LUN not found")
)

// exitCodes names iscsiadm's exit statuses (iscsiadm(8), "EXIT STATUS").
var exitCodes = [...]struct {
	name, meaning string
	err           error
}{
	1:  {"ISCSI_ERR", "generic error", nil},
	2:  {"ISCSI_ERR_SESS_NOT_FOUND", "session could not be found", ErrNotFound},
	3:  {"ISCSI_ERR_NOMEM", "could not allocate resource for operation", nil},
	4:  {"ISCSI_ERR_TRANS", "connect problem caused operation to fail", ErrConnect},
	5:  {"ISCSI_ERR_LOGIN", "generic iSCSI login failure", ErrLogin},
	6:  {"ISCSI_ERR_IDBM", "error accessing/managing iSCSI DB", nil},
	7:  {"ISCSI_ERR_INVAL", "invalid argument", nil},
	8:  {"ISCSI_ERR_TRANS_TIMEOUT", "connection timer expired while trying to connect", ErrTimeout},
	9:  {"ISCSI_ERR_INTERNAL", "generic internal iscsid/kernel failure", nil},
	10: {"ISCSI_ERR_LOGOUT", "iSCSI logout failed", nil},
	11: {"ISCSI_ERR_PDU_TIMEOUT", "iSCSI PDU timed out", ErrTimeout},
	12: {"ISCSI_ERR_TRANS_NOT_FOUND", "iSCSI transport module not loaded in kernel or iscsid", nil},
	13: {"ISCSI_ERR_ACCESS", "no permission to access iscsid or run iscsiadm", nil},
	14: {"ISCSI_ERR_TRANS_CAPS", "transport module did not support operation", nil},
	15: {"ISCSI_ERR_SESS_EXISTS", "session is logged in", ErrSessionExists},
	16: {"ISCSI_ERR_INVALID_MGMT_REQ", "invalid IPC MGMT request", nil},
	17: {"ISCSI_ERR_ISNS_UNAVAILABLE", "iSNS service is not supported", nil},
	18: {"ISCSI_ERR_ISCSID_COMM_ERR", "a read/write to iscsid failed", ErrDaemon},
	19: {"ISCSI_ERR_FATAL_LOGIN", "fatal iSCSI login error", ErrLogin},
	20: {"ISCSI_ERR_ISCSID_NOTCONN", "could not connect to iscsid", ErrDaemon},
	21: {"ISCSI_ERR_NO_OBJS_FOUND", "no records/targets/sessions/portals found", ErrNotFound},
	22: {"ISCSI_ERR_SYSFS_LOOKUP", "could not look up object in sysfs", nil},
	23: {"ISCSI_ERR_HOST_NOT_FOUND", "could not look up host", nil},
	24: {"ISCSI_ERR_LOGIN_AUTH_FAILED", "login failed due to authorization failure", ErrAuthFailed},
	25: {"ISCSI_ERR_ISNS_QUERY", "iSNS query failure", nil},
	26: {"ISCSI_ERR_ISNS_REG_FAILED", "iSNS registration/deregistration failed", nil},
	27: {"ISCSI_ERR_OP_NOT_SUPP", "operation not supported", nil},
	28: {"ISCSI_ERR_BUSY", "device or resource in use", ErrBusy},
	29: {"ISCSI_ERR_AGAIN", "operation failed, but retrying later may succeed", nil},
	30: {"ISCSI_ERR_UNKNOWN_DISCOVERY_TYPE", "unknown discovery type", nil},
	31: {"ISCSI_ERR_CHILD_TERMINATED", "child process terminated", nil},
	32: {"ISCSI_ERR_SESSION_NOT_CONNECTED", "session likely not connected", nil},
}

// ExitError is a failed iscsiadm run. Unwrap gives the sentinel for the
// exit status (ErrAuthFailed for 24, ...), if there is one.
type ExitError struct {
	Command string // "iscsiadm -m node ...", secrets redacted
	Code    int
	Stderr  string // its last lines, secrets redacted
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: exit status %d", e.Command, e.Code)
	if e.Code > 0 && e.Code < len(exitCodes) && exitCodes[e.Code].name != "" {
		fmt.Fprintf(&b, " (%s: %s)", exitCodes[e.Code].name, exitCodes[e.Code].meaning)
	}
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error {
	if e.Code > 0 && e.Code < len(exitCodes) {
		return exitCodes[e.Code].err
	}
	return nil
}

const maxStderr = 1024

// iscsiadm runs one iscsiadm command under the per-call timeout. Every
// string in secrets is redacted from anything that ends up in the error;
// callers pass the secrets of the operation even though no argument holds
// one, because iscsiadm's and iscsid's messages are not ours to vouch for.
// stdout is returned only on success: it may hold secrets (show -S).
func (c *Client) iscsiadm(ctx context.Context, secrets []string, args ...string) ([]byte, error) {
	callCtx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	stdout, stderr, err := c.runner().Run(callCtx, args)
	if err == nil {
		return stdout, nil
	}
	command := redact("iscsiadm "+strings.Join(args, " "), secrets)
	if ctxErr := callCtx.Err(); ctxErr != nil {
		if ctx.Err() == nil {
			// Our per-call deadline, not the caller's.
			return nil, fmt.Errorf("%s: no answer within %s: %w (%w)", command, c.timeout(), ErrTimeout, ctxErr)
		}
		return nil, fmt.Errorf("%s: %w", command, ctx.Err())
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) && coded.ExitCode() > 0 {
		return nil, &ExitError{Command: command, Code: coded.ExitCode(), Stderr: lastLines(redact(string(stderr), secrets))}
	}
	// Not an exit status: iscsiadm missing, not executable, killed.
	return nil, &redactedError{msg: command + ": " + redact(err.Error(), secrets), err: err}
}

// redactedError shows a redacted message but keeps the cause for
// errors.Is (exec.ErrNotFound, ...).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// lastLines flattens stderr to one line, keeping its end, where iscsiadm
// puts the reason. It runs after redaction: cutting first could leave half
// a secret that redact no longer recognises.
func lastLines(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	s = strings.TrimSpace(strings.Join(lines, "; "))
	if len(s) > maxStderr {
		s = "..." + s[len(s)-maxStderr:]
	}
	return s
}

// redact replaces every non-empty secret in s.
func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}
