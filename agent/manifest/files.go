package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// isManifestName reports whether a directory entry is read as a manifest.
// Hidden files are skipped: editors and tools write their temporary files
// there before renaming them into place.
func isManifestName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// effective is the merge of the drop-in directories.
type effective struct {
	files []string // sorted by base name
	// failedDirs could not be listed; the names they provided before are
	// unknown now, so the Builder keeps those files' last good objects.
	failedDirs []string
	probs      []Problem
}

// EffectiveFiles merges the drop-in directories: a file in a later
// directory replaces the file of the same base name in an earlier one, and
// a symlink to /dev/null masks it. Missing directories are fine. The result
// is sorted by base name, the order objects are considered in.
//
// With CheckOwnership, a directory that fails the check is reported, and
// its entries (masks included) are still returned: ParseFile refuses them,
// so the Builder keeps their last good objects instead of tearing down
// what an untrusted directory no longer declares.
func EffectiveFiles(dirs []string, opts Options) ([]string, []Problem) {
	e := effectiveFiles(dirs, opts)
	return e.files, e.probs
}

func effectiveFiles(dirs []string, opts Options) effective {
	var e effective
	byBase := map[string]string{}
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && !st.IsDir() {
			err = errors.New("not a directory")
		}
		if err != nil {
			e.probs = append(e.probs, Problem{File: dir, Reason: "cannot read: " + errText(err)})
			e.failedDirs = append(e.failedDirs, dir)
			continue
		}
		trusted := true
		if opts.CheckOwnership {
			if p, bad := checkOwner(dir, st); bad {
				e.probs = append(e.probs, p)
				trusted = false
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			e.probs = append(e.probs, Problem{File: dir, Reason: "cannot read: " + errText(err)})
			e.failedDirs = append(e.failedDirs, dir)
			continue
		}
		for _, ent := range entries {
			name := ent.Name()
			if !isManifestName(name) {
				continue
			}
			p := filepath.Join(dir, name)
			if trusted && isMask(p) {
				delete(byBase, name)
				continue
			}
			byBase[name] = p
		}
	}
	bases := make([]string, 0, len(byBase))
	for b := range byBase {
		bases = append(bases, b)
	}
	sort.Strings(bases)
	for _, b := range bases {
		e.files = append(e.files, byBase[b])
	}
	return e
}

// isMask reports whether p is a symlink to /dev/null, the systemd way of
// masking a file of the same name in an earlier directory.
func isMask(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := os.Readlink(p)
	if err != nil {
		return false
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(p), target)
	}
	if filepath.Clean(target) == "/dev/null" {
		return true
	}
	// A chain of links that still ends at the null device masks too.
	st, err := os.Stat(p)
	if err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && unix.Major(sys.Rdev) == 1 && unix.Minor(sys.Rdev) == 3
}

// checkOwner is sshd's StrictModes for one file or directory: owned by
// root and not writable by group or others.
func checkOwner(p string, fi fs.FileInfo) (Problem, bool) {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Problem{File: p, Reason: "refused: cannot tell its owner"}, true
	}
	if sys.Uid != 0 {
		return Problem{File: p, Reason: fmt.Sprintf("refused: owned by uid %d, not root", sys.Uid)}, true
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return Problem{File: p, Reason: fmt.Sprintf("refused: mode %04o lets group or others write it", perm)}, true
	}
	return Problem{}, false
}

// ParseFile reads, decodes and validates one manifest file. If anything is
// wrong the file is refused as a whole: it returns no objects and every
// problem found.
//
// With CheckOwnership the file (the target, if it is a symlink) and the
// directory holding it must pass checkOwner.
func ParseFile(path string, opts Options) ([]*Object, []Problem) {
	data, prob, ok := readFile(path, opts)
	if !ok {
		return nil, []Problem{prob}
	}
	return ParseBytes(path, data, opts)
}

func readFile(path string, opts Options) ([]byte, Problem, bool) {
	f, _, prob, ok := openChecked(path, opts)
	if !ok {
		return nil, prob, false
	}
	defer f.Close()
	return readOpened(f)
}

// openChecked opens the file after every check that does not read it:
// its directory's and its own ownership, a regular file, its size. The
// file's stat is what was opened.
func openChecked(path string, opts Options) (*os.File, fs.FileInfo, Problem, bool) {
	whole := func(reason string) Problem { return Problem{File: path, Reason: reason} }
	if opts.CheckOwnership {
		dir := filepath.Dir(path)
		st, err := os.Stat(dir)
		if err != nil {
			return nil, nil, whole("cannot read: " + errText(err)), false
		}
		if p, bad := checkOwner(dir, st); bad {
			return nil, nil, p, false
		}
	}
	// Stat first so that a FIFO or device named *.yaml is never opened.
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, whole("cannot read: " + errText(err)), false
	}
	if !st.Mode().IsRegular() {
		return nil, nil, whole("not a regular file"), false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, whole("cannot read: " + errText(err)), false
	}
	// Check what was opened, not what the name pointed at a moment ago.
	st, err = f.Stat()
	bad := func(reason string) (*os.File, fs.FileInfo, Problem, bool) {
		f.Close()
		return nil, nil, whole(reason), false
	}
	if err != nil {
		return bad("cannot read: " + errText(err))
	}
	if !st.Mode().IsRegular() {
		return bad("not a regular file")
	}
	if opts.CheckOwnership {
		if p, refused := checkOwner(path, st); refused {
			f.Close()
			return nil, nil, p, false
		}
	}
	if st.Size() > MaxFileSize {
		return bad(fmt.Sprintf("too big: %d bytes, the limit is 1 MiB", st.Size()))
	}
	return f, st, Problem{}, true
}

func readOpened(f *os.File) ([]byte, Problem, bool) {
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, Problem{File: f.Name(), Reason: "cannot read: " + errText(err)}, false
	}
	return data, Problem{}, true
}

// errText drops the path an *os.PathError repeats: the Problem names it.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
