// Package holders finds the processes that keep a path busy: an unmount
// refused with EBUSY says only "busy", and an operator needs to know who
// to stop. It reads /proc (cwd, root, open files, mapped files) and is
// meant for the rare moment a teardown fails, not for a hot path.
package holders

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Holder is one process that uses something at or under the path.
type Holder struct {
	PID  int
	Comm string
	// How names what points there: "cwd", "root", "fd N" or "map".
	How string
}

func (h Holder) String() string { return fmt.Sprintf("pid %d (%s, %s)", h.PID, h.Comm, h.How) }

// Find lists the processes (below procRoot, normally "/proc") whose cwd,
// root, an open file or a mapped file is path or lies under it. A process
// that exits meanwhile or cannot be read is skipped: the answer is a
// diagnosis, never a decision. Each process is listed once, by the first
// way found.
func Find(procRoot, path string) ([]Holder, error) {
	path = filepath.Clean(path)
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("find holders of %s: %w", path, err)
	}
	var out []Holder
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		if how, ok := holds(dir, path); ok {
			out = append(out, Holder{PID: pid, Comm: comm(dir), How: how})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// Describe renders holders for a message: "pid 12 (sleep, cwd), ...".
func Describe(hs []Holder) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, h.String())
	}
	return strings.Join(parts, ", ")
}

func holds(dir, path string) (string, bool) {
	for _, link := range []string{"cwd", "root"} {
		if under(readlink(filepath.Join(dir, link)), path) {
			return link, true
		}
	}
	fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
	for _, fd := range fds {
		if under(readlink(filepath.Join(dir, "fd", fd.Name())), path) {
			return "fd " + fd.Name(), true
		}
	}
	if mapsUnder(filepath.Join(dir, "maps"), path) {
		return "map", true
	}
	return "", false
}

func readlink(p string) string {
	s, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(s, " (deleted)")
}

// under: p is path itself or inside it.
func under(p, path string) bool {
	if p == "" {
		return false
	}
	return p == path || path == "/" || strings.HasPrefix(p, path+"/")
}

// mapsUnder: a line of /proc/PID/maps names a file under path. The
// pathname is the sixth field and may itself contain spaces.
func mapsUnder(maps, path string) bool {
	f, err := os.Open(maps)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 {
			continue
		}
		if under(strings.TrimSuffix(strings.TrimLeft(fields[5], " "), " (deleted)"), path) {
			return true
		}
	}
	return false
}

func comm(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return "?" // exited meanwhile
	}
	return strings.TrimSpace(string(b))
}
