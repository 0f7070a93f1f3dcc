package iscsi

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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
