package iscsi

// Running iscsiadm: its exit statuses, its timeouts, a real process.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
