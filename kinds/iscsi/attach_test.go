package iscsi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	iscsidrv "github.com/volumed/volumed/drivers/iscsi"
)

// recordingRunner stands in for iscsiadm: it records each call and
// fails it, so a test sees whether a login was tried.
type recordingRunner struct{ calls [][]string }

func (r *recordingRunner) Run(_ context.Context, args []string) ([]byte, []byte, error) {
	r.calls = append(r.calls, args)
	return nil, nil, errors.New("fake iscsiadm: no target here")
}

// kernelSessionsUnreadable stands in for the kernel's iscsi_session
// sysfs class, which this host's kernel lacks: its read fails (as a
// sysfs read racing a session's teardown, or an I/O error, does).
type kernelSessionsUnreadable struct{}

func (kernelSessionsUnreadable) Sessions() ([]iscsidrv.Session, error) {
	return nil, errors.New("read /sys/class/iscsi_session/session3/targetname: no such device")
}

// Issue 22, finding 4: an attach that cannot read the sessions fails
// without logging in. Before, it took the failed read for "no session",
// logged in, and recorded a session that may have been another tool's
// (or the firmware's) as volumed's, for a later teardown to log out.
func TestAttachRefusesWhenSessionsCannotBeRead(t *testing.T) {
	sys := t.TempDir()
	for _, d := range []string{"class/iscsi_session", "class/iscsi_connection"} {
		if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := &recordingRunner{}
	a := attacher{
		c:        &iscsidrv.Client{SysRoot: sys, DevRoot: t.TempDir(), NodeDB: t.TempDir(), Runner: run},
		sessions: kernelSessionsUnreadable{},
	}
	src := &Source{Portal: "192.0.2.10:3260", IQN: "iqn.2026-01.com.example:data", LUN: 0}
	d := &agent.Desired{Name: "v", Kind: Name, Spec: &manifest.VolumeSpec{Source: manifest.Source{Kind: Name, Spec: src}}}

	f, err := a.Attach(context.Background(), d)
	if err == nil || !strings.Contains(err.Error(), "read the iSCSI sessions") {
		t.Errorf("Attach = %+v, %v; want an error naming the sessions read", f, err)
	}
	if f.Owned {
		t.Errorf("an attachment was recorded as volumed's: %+v", f)
	}
	if len(run.calls) > 0 {
		t.Errorf("iscsiadm was called %q: a login went ahead on an unknown session table", run.calls)
	}
}
