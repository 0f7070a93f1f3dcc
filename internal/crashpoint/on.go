//go:build crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

var hits atomic.Int64

// Hit kills the process with SIGKILL when op:when is the configured point.
func Hit(op, when string) { HitFor(op, when, "") }

// HitFor is Hit for an operation of one volume: before the kill it says
// on stderr which volume's operation it killed ("crash point OP:WHEN
// volume=NAME"), which a test cannot tell from the order operations
// started in once one waiting for its intent's commit lets another start.
func HitFor(op, when, volume string) {
	want := os.Getenv(EnvVar)
	if want == "" {
		return
	}
	nth := int64(1)
	if i := strings.IndexByte(want, '#'); i >= 0 {
		if n, err := strconv.ParseInt(want[i+1:], 10, 64); err == nil && n > 0 {
			nth = n
		}
		want = want[:i]
	}
	if want != op+":"+when {
		return
	}
	if hits.Add(1) == nth {
		if volume != "" {
			fmt.Fprintf(os.Stderr, "crash point %s:%s volume=%s\n", op, when, volume)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns; SIGKILL is not deliverable to a handler
	}
}
