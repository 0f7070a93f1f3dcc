package crashcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"go.etcd.io/bbolt"
)

// helperEnv makes a test binary the bbolt checker of the file it names
// (HelperMain): bbolt panics or faults on some damage, which must end
// the child only.
const helperEnv = "VOLUMED_CRASHCHECK_BBOLT"

// HelperMain is called first in TestMain of a package that uses Run; in
// the checker child it checks and exits, elsewhere it returns.
func HelperMain() {
	path := os.Getenv(helperEnv)
	if path == "" {
		return
	}
	if err := bboltCheck(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// bboltCheck is bbolt's own full check, independent of the agent's.
func bboltCheck(path string) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// damaged checks a copy (at scratch) of the state file at path in a child
// and returns why it is damaged, or "" if it is sound or absent.
func damaged(path, scratch string) string {
	in, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	defer in.Close()
	// An empty file is one created and not yet written: nothing to lose.
	if fi, err := in.Stat(); err == nil && fi.Size() == 0 {
		return ""
	}
	out, err := os.Create(scratch)
	if err != nil {
		return err.Error()
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err.Error()
	}
	self, err := os.Executable()
	if err != nil {
		return err.Error()
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+scratch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i > 0 {
			msg = msg[:i]
		}
		return fmt.Sprintf("%v: %s", err, msg)
	}
	return ""
}
