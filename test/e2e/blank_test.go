package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// loopFileManifest writes a loop volume on an existing file (no create).
func (e *env) loopFileManifest(name, file string) {
	e.t.Helper()
	e.write(name+".yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source: {loop: {file: %s}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, name, file, e.target(name)))
}

// randomHead makes a 64 MiB image whose first 8 MiB are random bytes:
// what plain dm-crypt, a VeraCrypt volume or a raw database looks like.
func (e *env) randomHead(name string) string {
	e.t.Helper()
	img := e.image(name, 64<<20)
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, 8<<20); err != nil {
		e.t.Fatal(err)
	}
	return img
}

// textLog makes a 2.7 MB text file, as a log would be.
func (e *env) textLog(name string) string {
	e.t.Helper()
	var b strings.Builder
	for i := 0; b.Len() < 2_700_000; i++ {
		fmt.Fprintf(&b, "2026-11-26T07:%02d:%02d app[%d]: request %d served in %d ms\n", i/60%60, i%60, 1000+i%7, i, i%97)
	}
	p := filepath.Join(e.images, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// Issue 22, finding 1: no signature is not blank. An image of random
// bytes and a text log named as loop.file stay un-Ready with NotBlank
// (UnknownData, naming the offset) and their bytes unchanged; an
// existing all-zero image and an image volumed creates are formatted.
func TestUnknownDataIsNeverFormatted(t *testing.T) {
	e := newEnv(t)
	random := e.randomHead("random.img")
	text := e.textLog("app.log")
	zeros := e.image("zeros.img", 64<<20)
	before := map[string][32]byte{random: fileSum(t, random), text: fileSum(t, text)}

	e.loopFileManifest("random", random)
	e.loopFileManifest("text", text)
	e.loopFileManifest("zeros", zeros)
	e.volume("fresh", "ext4", "64Mi", "fresh")
	e.start()
	e.waitReady("zeros", "fresh")
	for _, name := range []string{"random", "text"} {
		c := e.waitCondition(name, "NotBlank", "first non-zero byte read is at offset 0", "volumed wipe")
		if c.Reason != "UnknownData" {
			t.Errorf("%s: condition %+v, want reason UnknownData", name, c)
		}
	}
	// Past a retry or two: still nothing written.
	time.Sleep(3 * time.Second)
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"random", "text"} {
		if v := find(st, name); v == nil || v.Phase == api.PhaseReady {
			t.Errorf("%s: %+v, want it not Ready", name, v)
		}
	}
	e.stop()
	e.waitExit(30 * time.Second)
	for p, sum := range before {
		if fileSum(t, p) != sum {
			t.Errorf("%s was written to", p)
		}
	}
}

// Issue 22, finding 2: a disk whose partition table was wiped while the
// kernel still lists its partition is not blank in `volumed disks`, and
// a disk volume on it leaves the ext4 in p1 alone.
func TestKernelOnlyPartitionIsNotBlank(t *testing.T) {
	e := newEnv(t)
	dev, img := e.loopDisk("disk.img", 64<<20)
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	sfdisk := exec.Command("sfdisk", "-q", dev)
	sfdisk.Stdin = strings.NewReader("label: dos\nstart=2048, size=100000, type=83\n")
	if out, err := sfdisk.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	part := dev + "p1"
	// The kernel is told of p1 by addpart where its reread left it out
	// (and again after wipefs, whose reread of the now missing table
	// drops it): that is the kernel-only partition of the finding.
	ensurePart := func() {
		if _, err := os.Stat(part); err != nil {
			run("addpart", dev, "1", "2048", "100000")
		}
		waitNode(t, part)
	}
	ensurePart()
	run("mkfs.ext4", "-q", "-F", part)
	run("wipefs", "-a", dev)
	ensurePart()
	if out, err := exec.Command("blkid", "-p", dev).CombinedOutput(); err == nil {
		t.Fatalf("the disk still carries a signature: %s", out)
	}
	p1 := partSum(t, img, 2048*512, 100000*512)

	r := row(t, disksJSON(t, "--socket", e.socket), dev)
	if r.Blank {
		t.Errorf("a disk whose kernel lists %s is blank: %+v", part, r)
	}
	e.diskManifest("whole", fmt.Sprintf("disk.path == %q", dev))
	e.start()
	c := e.waitCondition("whole", "NotBlank", "p1")
	if c.Reason != "KernelPartitions" {
		t.Errorf("condition %+v, want reason KernelPartitions", c)
	}
	time.Sleep(2 * time.Second)
	e.stop()
	e.waitExit(30 * time.Second)
	if partSum(t, img, 2048*512, 100000*512) != p1 {
		t.Errorf("the ext4 in %s was written to", part)
	}
	if out, err := exec.Command("blkid", "-p", "-s", "TYPE", "-o", "value", part).Output(); err != nil || strings.TrimSpace(string(out)) != "ext4" {
		t.Errorf("%s after: %v %q, want ext4", part, err, out)
	}
}

func partSum(t *testing.T, img string, off, n int64) [32]byte {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// waitNode waits for udev (or devtmpfs) to make a partition's node.
func waitNode(t *testing.T, p string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared", p)
}
