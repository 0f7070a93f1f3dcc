// Package safepath resolves the paths the agent mounts on and from
// without following symlinks, and hands back open file descriptors, so
// that a path swapped for a symlink after it was checked cannot redirect
// a mount (the Kubernetes subPath escapes, CVE-2017-1002101 and
// CVE-2021-25741, are the precedent). Every component is opened with
// openat2(2) RESOLVE_NO_SYMLINKS relative to the descriptor of the one
// before, and the caller then acts on the final descriptor, never on the
// path again.
//
// No symlink is followed anywhere in a path, parents included. A host
// where /srv is a link to /var/srv (OSTree systems) names the real path
// in its manifests; the error says where the link points.
package safepath

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSymlink is wrapped when a component of a path is a symlink.
var ErrSymlink = errors.New("is a symlink, and symlinks are not followed here")

// ErrNoOpenat2 is wrapped when the kernel lacks openat2(2) (Linux < 5.6).
var ErrNoOpenat2 = errors.New("the kernel lacks openat2 (Linux 5.6 or later is needed)")

const resolve = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH

// OpenDir opens the directory at the absolute path p as an O_PATH
// descriptor, refusing a symlink in any component. With create, missing
// directories are made one at a time with mode 0755 (regardless of
// umask), each below the descriptor of its already-checked parent.
func OpenDir(p string, create bool) (*os.File, error) {
	if !path.IsAbs(p) {
		return nil, fmt.Errorf("open %s: not an absolute path", p)
	}
	p = path.Clean(p)
	root, err := openat2(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open %s: /: %w", p, err)
	}
	f, err := walk(root, "/", components(p), create)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return f, nil
}

// OpenBeneath opens the directory sub (relative; no ".." component; no
// symlink anywhere in it) beneath the directory root as an O_PATH
// descriptor. An empty sub or "." opens root itself again. With create,
// missing directories are made as in OpenDir. The result can name
// nothing outside root, whatever is renamed or linked there meanwhile.
func OpenBeneath(root *os.File, sub string, create bool) (*os.File, error) {
	comps, err := relComponents(sub)
	if err != nil {
		return nil, err
	}
	start, err := openat2(int(root.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root.Name(), err)
	}
	f, err := walk(start, root.Name(), comps, create)
	if err != nil {
		return nil, fmt.Errorf("open %s beneath %s: %w", sub, root.Name(), err)
	}
	return f, nil
}

// OpenFile opens the file at the absolute path p with flags (O_RDWR,
// O_RDONLY, ...; O_CREAT is not supported), refusing a symlink in any
// component, the last one included. It is for loop image files.
func OpenFile(p string, flags int) (*os.File, error) {
	if !path.IsAbs(p) {
		return nil, fmt.Errorf("open %s: not an absolute path", p)
	}
	if flags&unix.O_CREAT != 0 {
		return nil, fmt.Errorf("open %s: O_CREAT is not supported", p)
	}
	p = path.Clean(p)
	dir, name := path.Split(p)
	if name == "" {
		return nil, fmt.Errorf("open %s: not a file", p)
	}
	d, err := OpenDir(dir, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := openat2(int(d.Fd()), name, flags)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, describe(int(d.Fd()), p, name, err))
	}
	return os.NewFile(uintptr(fd), p), nil
}

// walk opens comps one after the other below dir (an O_PATH descriptor
// named shown, which walk takes over) and returns the last.
func walk(dirFd int, shown string, comps []string, create bool) (*os.File, error) {
	for _, c := range comps {
		next := path.Join(shown, c)
		fd, err := openDirAt(dirFd, next, c, create)
		unix.Close(dirFd)
		if err != nil {
			return nil, err
		}
		dirFd, shown = fd, next
	}
	return os.NewFile(uintptr(dirFd), shown), nil
}

func openDirAt(dirFd int, shown, name string, create bool) (int, error) {
	for {
		fd, err := openat2(dirFd, name, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			return fd, nil
		}
		if !create || !errors.Is(err, unix.ENOENT) {
			return -1, describe(dirFd, shown, name, err)
		}
		err = unix.Mkdirat(dirFd, name, 0o755)
		if errors.Is(err, unix.EEXIST) {
			continue // raced with another creator; open what is there now
		}
		if err != nil {
			return -1, fmt.Errorf("mkdir %s: %w", shown, err)
		}
		if err := fixMode(dirFd, shown, name); err != nil {
			return -1, err
		}
	}
}

// fixMode makes a directory just created 0755 whatever the umask took
// away, through a descriptor so that a swapped-in symlink is not chmodded.
func fixMode(dirFd int, shown, name string) error {
	fd, err := openat2(dirFd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return describe(dirFd, shown, name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", shown, err)
	}
	return nil
}

// describe turns an openat2 error on name (below dirFd, shown in full)
// into one that says what is wrong with which component.
func describe(dirFd int, shown, name string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		buf := make([]byte, unix.PathMax)
		if n, rerr := unix.Readlinkat(dirFd, name, buf); rerr == nil {
			return fmt.Errorf("%s %w (it points to %s)", shown, ErrSymlink, buf[:n])
		}
		return fmt.Errorf("%s %w", shown, ErrSymlink)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s is not a directory: %w", shown, err)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s does not exist: %w", shown, err)
	case errors.Is(err, unix.EXDEV):
		// RESOLVE_BENEATH: a name that left the directory, which the
		// component checks should already have refused.
		return fmt.Errorf("%s escapes its parent: %w", shown, err)
	}
	return fmt.Errorf("%s: %w", shown, err)
}

func openat2(dirFd int, name string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	if name == "/" {
		how.Resolve &^= unix.RESOLVE_BENEATH // the starting point of every absolute walk
	}
	for tries := 1; ; tries++ {
		fd, err := unix.Openat2(dirFd, name, &how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOSYS):
			return -1, ErrNoOpenat2
		case tries < 100 && (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)):
			// EAGAIN: a rename elsewhere raced the lookup, and the kernel
			// asks for a retry rather than risk a wrong answer.
			continue
		}
		return -1, err
	}
}

// components splits a clean absolute path into its names.
func components(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// relComponents validates a path meant to stay beneath a directory and
// splits it. ".." is refused rather than resolved, even where it would
// stay inside ("a/../b"): a path that needs it is not what was meant.
func relComponents(sub string) ([]string, error) {
	if path.IsAbs(sub) {
		return nil, fmt.Errorf("path %q: must be relative to the volume", sub)
	}
	var comps []string
	for _, c := range strings.Split(sub, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("path %q: must not contain \"..\"", sub)
		default:
			comps = append(comps, c)
		}
	}
	return comps, nil
}

// Within reports whether p is dir or lies under it; both are clean and
// absolute. It compares names only: a mount point's or a manifest's path.
func Within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
