package holders

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A process whose working directory is inside the path is found with its
// pid and command; one elsewhere is not; an open file is found as an fd.
func TestFindCwdAndOpenFile(t *testing.T) {
	dir := t.TempDir()
	inside := filepath.Join(dir, "sub")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	sleep.Dir = inside
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()

	f, err := os.Create(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	hs, err := Find("/proc", dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]Holder{}
	for _, h := range hs {
		got[h.PID] = h
	}
	if h := got[sleep.Process.Pid]; h.Comm != "sleep" || h.How != "cwd" {
		t.Errorf("sleep (pid %d) as %+v, want comm sleep by cwd; all: %s", sleep.Process.Pid, h, Describe(hs))
	}
	if h := got[os.Getpid()]; !strings.HasPrefix(h.How, "fd ") {
		t.Errorf("this test (pid %d) as %+v, want an fd; all: %s", os.Getpid(), h, Describe(hs))
	}

	other := t.TempDir()
	hs, err = Find("/proc", other)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 0 {
		t.Errorf("holders of an unused dir: %s", Describe(hs))
	}
}

// A sibling whose name starts with the path's name is not inside it.
func TestUnderIsByComponent(t *testing.T) {
	for _, c := range []struct {
		p, path string
		want    bool
	}{
		{"/mnt/a", "/mnt/a", true},
		{"/mnt/a/b", "/mnt/a", true},
		{"/mnt/ab", "/mnt/a", false},
		{"", "/mnt/a", false},
		{"/x", "/", true},
	} {
		if got := under(c.p, c.path); got != c.want {
			t.Errorf("under(%q, %q) = %v, want %v", c.p, c.path, got, c.want)
		}
	}
}

// A mapped file is found through maps, whose pathname may hold spaces.
func TestMapsUnder(t *testing.T) {
	maps := filepath.Join(t.TempDir(), "maps")
	content := "7f00-7f01 r--p 00000000 fd:01 123    /srv/my data/lib.so\n7f01-7f02 rw-p 00000000 00:00 0 \n"
	if err := os.WriteFile(maps, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if !mapsUnder(maps, "/srv/my data") {
		t.Error("mapped file under a path with a space not found")
	}
	if mapsUnder(maps, "/srv/my") {
		t.Error("a sibling path matched")
	}
}
