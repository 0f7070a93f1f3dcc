package blockfs

// The prober's reads: cached windows of the device, fetched together
// before the signature checks run, so that a cold device costs one round
// trip of reads, not one per magic.

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

type windowKey struct{ start, size int64 }

// window is the size and alignment of a cached read in the first 64 KiB,
// where a dozen magics lie; pageWindow is that of a cached read anywhere else,
// where they lie alone (LUKS2's secondary headers, 128 KiB to 4 MiB in;
// the md superblocks and the GPT backup at the end): a 64 KiB window
// there reads 16 times the bytes for a few of them, each through the
// device's driver (docs/performance.md has what a probe read).
const (
	window     = 64 * kib
	pageWindow = 4 * kib
)

// windowAt is the size of the cached read that holds off.
func windowAt(off int64) int64 {
	if off < window {
		return window
	}
	return pageWindow
}

// read returns n bytes at off, or nil when [off, off+n) is not inside the
// device. A failing read is an error: "could not look" is never "blank".
func (p *prober) read(off, n int64) ([]byte, error) {
	if off < 0 || n <= 0 || off > p.size || n > p.size-off {
		return nil, nil
	}
	size := windowAt(off)
	if p.planned != nil {
		if start := off - off%size; off+n <= start+size {
			p.planned[windowKey{start, size}] = true
		}
		return make([]byte, n), nil
	}
	if start := off - off%size; off+n <= start+size {
		if w := p.window(start, size); w != nil && off+n <= start+int64(len(w)) {
			return w[off-start : off-start+n : off-start+n], nil
		}
	}
	buf := make([]byte, n)
	got, err := p.r.ReadAt(buf, off)
	if got == len(buf) {
		return buf, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("read %d bytes at offset %d: %w", n, off, err)
}

// window returns the device's bytes from start (aligned) to the end of
// its window or of the device, or nil when they cannot be read whole:
// the caller then reads only what it asked for, so a bad sector near a
// magic is still the error of the read that needs it, never of another.
func (p *prober) window(start, size int64) []byte {
	k := windowKey{start, size}
	if w, ok := p.windows[k]; ok {
		return w
	}
	buf := p.readWindow(k)
	if p.windows == nil {
		p.windows = map[windowKey][]byte{}
	}
	p.windows[k] = buf
	return buf
}

// readWindow reads a window whole, or returns nil.
func (p *prober) readWindow(k windowKey) []byte {
	buf := make([]byte, min(k.size, p.size-k.start))
	if got, err := p.r.ReadAt(buf, k.start); got != len(buf) || (err != nil && !errors.Is(err, io.EOF)) {
		return nil
	}
	return buf
}

// prefetch reads, all at once, the windows the steps read on a blank
// device of this size (a dry run of them over zeros names them): each
// read of a cold device is a round trip through its driver, a loop
// device's worker, and a dozen of them one after another made the probe
// slower than the mount that follows it. A window that cannot be read
// is left for the step that needs it, whose own read then fails.
func (p *prober) prefetch() {
	dry := &prober{size: p.size, planned: map[windowKey]bool{}}
	for _, step := range dry.steps() {
		_ = step()
	}
	keys := make([]windowKey, 0, len(dry.planned))
	for k := range dry.planned {
		keys = append(keys, k)
	}
	bufs := make([][]byte, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs[i] = p.readWindow(k)
		}()
	}
	wg.Wait()
	p.windows = make(map[windowKey][]byte, len(keys))
	for i, k := range keys {
		if bufs[i] != nil {
			p.windows[k] = bufs[i]
		}
	}
}
