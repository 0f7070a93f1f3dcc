package linkwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestWatchWithoutSetns: the shipped unit has RestrictNamespaces=yes,
// whose seccomp filter denies setns(2). The watcher must subscribe
// without it (it used to enter its own namespace and fail, so the agent
// ran without link events). The child process installs such a filter.
func TestWatchWithoutSetns(t *testing.T) {
	if os.Getenv("LINKWATCH_DENY_SETNS") == "1" {
		os.Exit(watchDenied())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchWithoutSetns$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LINKWATCH_DENY_SETNS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Watch under a seccomp filter that denies setns (RestrictNamespaces=yes): %v\n%s", err, out)
	}
}

// watchDenied runs in the child: the filter, a check that it bites, Watch.
func watchDenied() int {
	if err := denySetns(); err != nil {
		fmt.Println("install the seccomp filter:", err)
		return 2
	}
	cur, err := netns.Get()
	if err != nil {
		fmt.Println(err)
		return 2
	}
	if err := netns.Set(cur); !errors.Is(err, unix.EPERM) {
		fmt.Printf("setns under the filter: %v, want EPERM (the filter does not bite)\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Watch(ctx, func(Change) {}); err != nil {
		fmt.Println("Watch:", err)
		return 1
	}
	return 0
}

// denySetns installs, on every thread, a seccomp filter that fails
// setns(2) with EPERM and allows everything else.
func denySetns() error {
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_SETNS},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return errno
	}
	return nil
}
