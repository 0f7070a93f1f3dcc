package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
)

// ErrCheckUnavailable marks a check that could not run at all (the checker binary could not be
// started). Open reports it as an error instead of moving a possibly healthy file aside.
var ErrCheckUnavailable = errors.New("state file check unavailable")

// bbolt's on-disk meta page: a 16-byte page header, then the meta fields. bbolt writes them in
// the host's byte order.
const (
	pageHeaderSize = 16
	metaSize       = 64 // magic, version, pageSize, flags (4 x u32), root{pgid,seq}, freelist, pgid, txid, checksum (6 x u64)
	metaSumLen     = 56 // the checksum covers everything before it
	metaPageFlag   = 0x04
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	noFreelist     = ^uint64(0)
	minPageSize    = 512
	maxPageSize    = 1 << 24 // bbolt's own probe for the second meta stops at 16 MiB
	childTimeout   = 30 * time.Second
	stderrKeep     = 4096
)

type metaPage struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readMeta reads and validates the meta page expected at offset off with page id wantID.
func readMeta(f *os.File, off int64, wantID uint64) (metaPage, error) {
	var buf [pageHeaderSize + metaSize]byte
	if _, err := f.ReadAt(buf[:], off); err != nil {
		return metaPage{}, fmt.Errorf("read meta page at %d: %w", off, err)
	}
	ne := binary.NativeEndian
	if id := ne.Uint64(buf[0:]); id != wantID {
		return metaPage{}, fmt.Errorf("meta page at %d: page id %d, want %d", off, id, wantID)
	}
	if flags := ne.Uint16(buf[8:]); flags != metaPageFlag {
		return metaPage{}, fmt.Errorf("meta page at %d: flags %#x, not a meta page", off, flags)
	}
	m := buf[pageHeaderSize:]
	if magic := ne.Uint32(m[0:]); magic != boltMagic {
		return metaPage{}, fmt.Errorf("meta page at %d: bad magic %#x", off, magic)
	}
	if v := ne.Uint32(m[4:]); v != boltVersion {
		return metaPage{}, fmt.Errorf("meta page at %d: version %d, want %d", off, v, boltVersion)
	}
	h := fnv.New64a()
	h.Write(m[:metaSumLen])
	if sum := ne.Uint64(m[metaSumLen:]); sum != h.Sum64() {
		return metaPage{}, fmt.Errorf("meta page at %d: checksum mismatch", off)
	}
	mp := metaPage{
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		pgid:     ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}
	ps := mp.pageSize
	if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
		return metaPage{}, fmt.Errorf("meta page at %d: implausible page size %d", off, ps)
	}
	if wantID == 1 && int64(ps) != off {
		return metaPage{}, fmt.Errorf("meta page at %d: page size %d does not match its offset", off, ps)
	}
	return mp, nil
}

// PrecheckFile checks a bbolt file without bbolt and without mmap, so that a damaged file
// cannot crash the caller: bbolt maps the whole file and a page beyond the end of a truncated
// file is a SIGBUS that no recover() catches. It verifies that at least one meta page is valid
// and that the newest valid meta describes a file no longer than the one on disk.
func PrecheckFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("precheck %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("precheck %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("precheck %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	size := fi.Size()
	if size < 2*minPageSize {
		return fmt.Errorf("precheck %s: %d bytes is too small for a bbolt file", path, size)
	}

	m0, err0 := readMeta(f, 0, 0)
	var m1 metaPage
	err1 := errors.New("no valid second meta page")
	if err0 == nil {
		m1, err1 = readMeta(f, int64(m0.pageSize), 1)
	} else {
		// Like bbolt: without the first meta the page size is unknown, so look for the second
		// meta at every plausible page size.
		for ps := int64(1024); ps <= maxPageSize && ps+pageHeaderSize+metaSize <= size; ps <<= 1 {
			if m, err := readMeta(f, ps, 1); err == nil {
				m1, err1 = m, nil
				break
			}
		}
	}

	var best metaPage
	switch {
	case err0 != nil && err1 != nil:
		return fmt.Errorf("precheck %s: no valid meta page: %v; %v", path, err0, err1)
	case err0 != nil:
		best = m1
	case err1 != nil:
		best = m0
	case m1.txid > m0.txid:
		best = m1
	default:
		best = m0
	}

	ps := int64(best.pageSize)
	if size < 2*ps {
		return fmt.Errorf("precheck %s: %d bytes is shorter than two %d-byte pages", path, size, ps)
	}
	if best.pgid < 2 || best.root < 2 || best.root >= best.pgid {
		return fmt.Errorf("precheck %s: meta (txid %d) has root page %d outside [2,%d)", path, best.txid, best.root, best.pgid)
	}
	if best.freelist != noFreelist && (best.freelist < 2 || best.freelist >= best.pgid) {
		return fmt.Errorf("precheck %s: meta (txid %d) has freelist page %d outside [2,%d)", path, best.txid, best.freelist, best.pgid)
	}
	if best.pgid > uint64(size/ps) {
		return fmt.Errorf("precheck %s: truncated: meta (txid %d) needs %d pages of %d bytes, file has %d bytes",
			path, best.txid, best.pgid, ps, size)
	}
	return nil
}

// CheckFile is the full check that cmd/volumed runs in a child process: PrecheckFile, then a
// read-only bbolt open and tx.Check, all errors consumed, the first returned. A panic or a fault
// in the calling goroutine becomes an error, but tx.Check runs bbolt's own goroutine, where a
// panic (bbolt asserts on garbage pages) or a fault still kills the process: run it in a child.
func CheckFile(path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("check %s: bbolt panicked: %v", path, r)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if err := PrecheckFile(path); err != nil {
		return err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("check %s: open: %w", path, err)
	}
	defer db.Close()
	var first error
	err = db.View(func(tx *bbolt.Tx) error {
		// Drain the channel: the checker goroutine blocks until every error is consumed.
		for e := range tx.Check() {
			if first == nil {
				first = e
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if first != nil {
		return fmt.Errorf("check %s: %w", path, first)
	}
	return nil
}

// ChildCheck returns an Options.Check that runs `exe args... path` and treats anything but a
// zero exit (an error exit, a signal, a timeout) as a damaged file, quoting the child's stderr.
// cmd/volumed passes its own executable and a hidden subcommand that calls CheckFile.
func ChildCheck(exe string, args ...string) func(path string) error {
	args = slices.Clone(args)
	return func(path string) error {
		ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
		defer cancel()
		return runChild(ctx, exec.CommandContext(ctx, exe, append(slices.Clone(args), path)...))
	}
}

// runChild runs a checker command built with ctx and maps its fate to an error.
func runChild(ctx context.Context, cmd *exec.Cmd) error {
	var stderr limitedBuffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w: %w", cmd.Path, ErrCheckUnavailable, err)
	}
	err := cmd.Wait()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(stderr.String())
	if ctx.Err() != nil {
		return fmt.Errorf("checker %s: timed out (%v): %s", cmd.Path, ctx.Err(), msg)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("checker %s: killed by signal %v: %s", cmd.Path, ws.Signal(), msg)
		}
		return fmt.Errorf("checker %s: exit status %d: %s", cmd.Path, ee.ExitCode(), msg)
	}
	return fmt.Errorf("checker %s: %w: %s", cmd.Path, err, msg)
}

// limitedBuffer keeps the head of the child's stderr: the panic or fault message comes first,
// a goroutine dump can be megabytes.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := stderrKeep - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
