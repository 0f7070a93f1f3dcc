package fresh

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// suite is the Debian release the root is made of: the one the project's
// machines run.
const suite = "bookworm"

// baseArgs make the root a fresh machine is: Debian's minbase (the
// Essential packages and apt), which is less than any CI image, plus the
// README's prerequisites besides Go (make, and gcc with libc6-dev for
// go test -race). Whatever else the suite needs, deps.sh must bring.
var baseArgs = []string{"--variant=minbase", "--include=make,gcc,libc6-dev", suite}

// cacheDir is where the base tarball and apt's downloads are kept
// between runs: VOLUMED_FRESH_CACHE, or <repo>/.cache/fresh.
func cacheDir(t *testing.T, repo string) string {
	t.Helper()
	dir := cmp.Or(os.Getenv("VOLUMED_FRESH_CACHE"), filepath.Join(repo, ".cache/fresh"))
	if err := os.MkdirAll(filepath.Join(dir, "archives/partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// baseTarball returns the cached minbase tarball, building it with
// mmdebstrap first when the cache lacks it. Its name carries a hash of
// the arguments, so a change of them builds a new one. A lock keeps two
// test processes from building it at once.
func baseTarball(t *testing.T, cache string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(strings.Join(baseArgs, "\x00")))
	tarball := filepath.Join(cache, "minbase-"+suite+"-"+hex.EncodeToString(sum[:6])+".tar")
	lock, err := os.OpenFile(filepath.Join(cache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tarball); err == nil {
		t.Logf("base root: %s (cached)", tarball)
		return tarball
	}
	// mmdebstrap picks its output's format by the name's extension.
	tmp := strings.TrimSuffix(tarball, ".tar") + ".part.tar"
	start := time.Now()
	args := append([]string{"--quiet"}, baseArgs...)
	out, err := exec.Command("mmdebstrap", append(args, tmp)...).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		t.Fatalf("mmdebstrap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("base root: %s built in %s", tarball, time.Since(start).Round(time.Second))
	return tarball
}

func sizeOf(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%d MiB", fi.Size()>>20)
}
