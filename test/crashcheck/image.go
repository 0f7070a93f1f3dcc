package crashcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/logwrites"
)

// replayer keeps one image replayed forward to the durable part of the
// states it served, so that each state costs a copy and its own tail.
type replayer struct {
	log *logwrites.Log
	img *os.File
	at  int // entries applied to img
}

func newReplayer(c Case) (*replayer, error) {
	path := filepath.Join(c.Work, "base.img")
	if err := SparseCopy(path, c.Base); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &replayer{log: c.Log, img: f}, nil
}

func (r *replayer) close() {
	r.img.Close()
	os.Remove(r.img.Name())
}

// prepare leaves dir/disk.img holding state st.
func (r *replayer) prepare(st logwrites.State, dir string) error {
	d := r.log.Durable(st.End)
	if d < r.at {
		return fmt.Errorf("states out of order: durable part %d, image at %d", d, r.at)
	}
	if err := r.log.Replay(r.img, r.at, d, nil); err != nil {
		return err
	}
	r.at = d
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	img := filepath.Join(dir, "disk.img")
	if err := SparseCopy(img, r.img.Name()); err != nil {
		return err
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return r.log.Replay(f, d, st.End, st.Dropped())
}

// SparseCopy copies src to dst, holes left holes (SEEK_DATA/SEEK_HOLE):
// a device image is mostly holes, and a copy per state must stay cheap.
func SparseCopy(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if err := out.Truncate(fi.Size()); err != nil {
		out.Close()
		return err
	}
	fd := int(in.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			out.Close()
			return fmt.Errorf("copy %s: seek data: %w", src, err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			out.Close()
			return fmt.Errorf("copy %s: seek hole: %w", src, err)
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			out.Close()
			return fmt.Errorf("copy %s: %w", src, err)
		}
		off = hole
	}
	return out.Close()
}

// signature is what blkid finds on an image: a filesystem's type and UUID.
type signature struct{ Type, UUID string }

// probe reads the signature of a file with blkid's low-level probe (no
// cache, no udev); a missing file or one without a signature gives none.
func probe(path string) (signature, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return signature{}, nil
	}
	out, err := exec.Command("blkid", "-p", "-o", "export", path).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return signature{}, nil // nothing found
	}
	if err != nil {
		return signature{}, fmt.Errorf("blkid -p %s: %w", path, err)
	}
	var s signature
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "TYPE="); ok {
			s.Type = v
		}
		if v, ok := strings.CutPrefix(line, "UUID="); ok {
			s.UUID = v
		}
	}
	return s, nil
}

// mountImage attaches img to a loop device and mounts it at dir.
func mountImage(img, dir string) error {
	dev, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		return fmt.Errorf("losetup %s: %w", img, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("mount", string(bytes.TrimSpace(dev)), dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount the replayed filesystem: %w: %s", err, out)
	}
	return nil
}
