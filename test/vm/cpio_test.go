package vm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"testing"
)

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks
// an initramfs from. Parent directories are emitted before their
// children; the first error sticks and is returned by close.
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCPIO(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, dirs: map[string]bool{".": true, "": true}}
}

// header writes one entry's header and name, padded to 4 bytes.
func (c *cpioWriter) header(name string, mode, size, nlink, rdevMajor, rdevMinor uint32) {
	if c.err != nil {
		return
	}
	c.ino++
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	_, c.err = io.WriteString(c.w, h+name+"\x00"+pad(len(h)+len(name)+1))
}

func (c *cpioWriter) data(b []byte) {
	if c.err != nil {
		return
	}
	if _, c.err = c.w.Write(b); c.err == nil {
		_, c.err = io.WriteString(c.w, pad(len(b)))
	}
}

func pad(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }

// clean turns "/a/b" into "a/b", the form the kernel expects.
func clean(name string) string { return strings.TrimPrefix(path.Clean("/"+name), "/") }

func (c *cpioWriter) dir(name string) {
	name = clean(name)
	if c.dirs[name] {
		return
	}
	c.dir(path.Dir(name))
	c.header(name, syscall.S_IFDIR|0o755, 0, 2, 0, 0)
	c.dirs[name] = true
}

func (c *cpioWriter) file(name string, perm uint32, b []byte) {
	name = clean(name)
	c.dir(path.Dir(name))
	c.header(name, syscall.S_IFREG|perm, uint32(len(b)), 1, 0, 0)
	c.data(b)
}

// copyFile adds the host file src (symlinks followed) as name.
func (c *cpioWriter) copyFile(name, src string, perm uint32) {
	if c.err != nil {
		return
	}
	b, err := os.ReadFile(src)
	if err != nil {
		c.err = fmt.Errorf("cpio: %w", err)
		return
	}
	c.file(name, perm, b)
}

func (c *cpioWriter) symlink(name, target string) {
	name = clean(name)
	c.dir(path.Dir(name))
	c.header(name, syscall.S_IFLNK|0o777, uint32(len(target)), 1, 0, 0)
	c.data([]byte(target))
}

func (c *cpioWriter) charDev(name string, perm, major, minor uint32) {
	name = clean(name)
	c.dir(path.Dir(name))
	c.header(name, syscall.S_IFCHR|perm, 0, 1, major, minor)
}

func (c *cpioWriter) close() error {
	c.header("TRAILER!!!", 0, 0, 1, 0, 0)
	return c.err
}

// TestCPIOWriter checks the archive against another reader (busybox cpio,
// which the harness needs anyway): names, types, contents.
func TestCPIOWriter(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		missing(t, "busybox (busybox-static)", err)
	}
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.file("/a/b/hello.txt", 0o644, []byte("hello, odd length"))
	c.file("a/run.sh", 0o755, []byte("#!/bin/sh\n"))
	c.symlink("/a/link", "b/hello.txt")
	c.dir("/empty")
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d is not a multiple of 4", buf.Len())
	}
	list := exec.Command(bb, "cpio", "-t", "-v")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("busybox cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{"drwxr-xr-x", "a/b/hello.txt", "-rwxr-xr-x", "a/run.sh", "a/link -> b/hello.txt", "empty"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("listing lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	extract := exec.Command(bb, "cpio", "-i", "-d")
	extract.Dir = dir
	extract.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio -i: %v\n%s", err, out)
	}
	got, err := os.ReadFile(dir + "/a/link")
	if err != nil || string(got) != "hello, odd length" {
		t.Errorf("a/link reads %q, %v; want the contents of a/b/hello.txt", got, err)
	}
}
