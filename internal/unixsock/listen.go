// Package unixsock opens and guards the agent's unix sockets (the local
// API's and the CSI endpoint's) the same way: a socket another agent
// answers on is never taken over, and only root peers are served.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options say how Listen makes the socket.
type Options struct {
	// DirMode is the mode of the socket's directory when Listen makes it.
	DirMode os.FileMode
	// Flag names the option that sets the path, for the refusal's advice
	// ("--socket", "--csi-endpoint").
	Flag string
}

// Listen opens a unix socket at path (mode 0600). A stale socket file
// (nobody answers on it: a previous run was killed) is replaced; a socket
// another process answers on is never taken over: that agent would keep
// running unreachable, and both would act on the host.
func Listen(path string, o Options) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), o.DirMode); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	// Without the lock, two agents starting at once could both find the
	// socket stale, and the later one's removal would unlink the socket
	// the first had just made.
	unlock, err := lockPath(path + ".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := removeStale(path, o.Flag); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return ln, nil
}

// lockPath takes an exclusive flock on path (made if missing) and
// returns its release. The file is left in place: removing a lock file
// would let two processes lock two different files of the same name.
func lockPath(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("socket lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// removeStale removes the socket a previous run left behind, and refuses
// when a live agent still answers on it: only a refused connection
// (nobody listens) or a vanished file means stale.
func removeStale(socket, flag string) error {
	fi, err := os.Lstat(socket)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", socket, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", socket)
	}
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another volumed answers on the socket %s; refusing to take it over (stop that agent, or give this one another %s)", socket, flag)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) {
		// A timeout is an agent too busy to accept, not a dead one.
		return fmt.Errorf("socket %s: cannot tell whether another volumed answers on it: %w", socket, err)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", socket, err)
	}
	return nil
}
