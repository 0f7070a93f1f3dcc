package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// diskRow is what `volumed disks -o json` prints per disk (the fields
// checked here).
type diskRow struct {
	Path       string   `json:"path"`
	Transport  string   `json:"transport"`
	Size       int64    `json:"size"`
	Blank      bool     `json:"blank"`
	Signatures []string `json:"signatures"`
	Volumes    []string `json:"volumes"`
}

func disksJSON(t *testing.T, args ...string) []diskRow {
	t.Helper()
	out, err := exec.Command(volumedBin, append([]string{"disks", "-o", "json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("volumed disks: %v: %s", err, out)
	}
	var rows []diskRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("volumed disks -o json: %v: %s", err, out)
	}
	return rows
}

func row(t *testing.T, rows []diskRow, path string) diskRow {
	t.Helper()
	i := slices.IndexFunc(rows, func(r diskRow) bool { return r.Path == path })
	if i < 0 {
		t.Fatalf("%s is not listed: %+v", path, rows)
	}
	return rows[i]
}

// `volumed disks` lists a blank disk with its facts, tries a selector,
// and names the volume on a disk when the agent runs.
func TestDisksCommand(t *testing.T) {
	e := newEnv(t)
	blank, _ := e.loopDisk("blank.img", 64<<20)

	// No agent: the facts alone.
	r := row(t, disksJSON(t, "--socket", e.socket), blank)
	if r.Transport != "loop" || r.Size != 64<<20 || !r.Blank || len(r.Signatures) != 0 || r.Volumes == nil || len(r.Volumes) != 0 {
		t.Errorf("blank disk: %+v", r)
	}

	match := fmt.Sprintf(`disk.path == %q && disk.blank`, blank)
	out, err := exec.Command(volumedBin, "disks", "--socket", e.socket, "--match", match).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "picks "+blank+" is the only disk that matches") {
		t.Errorf("disks --match: %v\n%s", err, out)
	}
	out, err = exec.Command(volumedBin, "disks", "--match", "disk.sise > 1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--match: 1:5: undefined field 'sise'") {
		t.Errorf("disks --match with a typo: %v\n%s", err, out)
	}

	// With the agent: the loop device of a volume names it.
	e.volume("data", "ext4", "64Mi", "data")
	e.start()
	st := e.waitReady("data")
	dev := find(st, "data").Device
	r = row(t, disksJSON(t, "--socket", e.socket), dev)
	if !slices.Equal(r.Volumes, []string{"data"}) || r.Blank || !slices.Contains(r.Signatures, "ext4") {
		t.Errorf("the volume's disk: %+v", r)
	}
	if r := row(t, disksJSON(t, "--socket", e.socket), blank); len(r.Volumes) != 0 {
		t.Errorf("blank disk with the agent running: %+v", r)
	}
}
