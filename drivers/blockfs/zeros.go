package blockfs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"

	"github.com/volumed/volumed/internal/blank"
)

// The zero-read's shape: the ends of a device, where labels, tables and
// superblocks live, plus a sample across it, where data lives. Its cost
// is bounded whatever the device's size: at most 2 MiB + 64 × 64 KiB.
const (
	zeroEdge    = 1 << 20
	zeroBlock   = 64 * kib
	zeroSamples = 64
)

// ZeroSeed is the sample's seed for a device of size bytes: fixed by
// the size alone, so every caller (the agent, volumed disks, volumed
// wipe) reads the same blocks of a device whatever path names it, and
// a report can be reproduced.
func ZeroSeed(size int64) uint64 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "volumed-blank:%d", size)
	return h.Sum64()
}

// ZeroRegions are the [offset, length) ranges the blank rule's
// zero-read reads, in read order, all within [0, size) and aligned to
// 4 KiB: what a wipe must leave zero.
func ZeroRegions(size int64, seed uint64) [][2]int64 {
	if size <= 2*zeroEdge {
		return [][2]int64{{0, size}}
	}
	tail := (size - zeroEdge) &^ (directAlign - 1)
	out := [][2]int64{{0, zeroEdge}, {tail, size - tail}}
	span := tail - zeroEdge - zeroBlock
	if span <= 0 {
		return [][2]int64{{0, size}}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var mid [][2]int64
	for range zeroSamples {
		off := (zeroEdge + rng.Int64N(span)) &^ (directAlign - 1)
		mid = append(mid, [2]int64{off, zeroBlock})
	}
	slices.SortFunc(mid, func(a, b [2]int64) int { return int(a[0]>>12 - b[0]>>12) })
	return append(out, mid...)
}

// ReadZeros reads the regions the blank rule looks at and says where
// the first non-zero byte is. It stops at the first one found.
func ReadZeros(r io.ReaderAt, size int64, seed uint64) (blank.Zeros, error) {
	z := blank.Zeros{Read: true, FirstNonZero: -1, Seed: seed}
	buf := make([]byte, zeroEdge)
	for _, reg := range ZeroRegions(size, seed) {
		for off := reg[0]; off < reg[0]+reg[1]; {
			n := min(int64(len(buf)), reg[0]+reg[1]-off)
			got, err := r.ReadAt(buf[:n], off)
			if err != nil && !(errors.Is(err, io.EOF) && int64(got) == n) {
				return blank.Zeros{}, fmt.Errorf("read %d bytes at %d: %w", n, off, err)
			}
			z.Bytes += n
			if i := firstNonZero(buf[:n]); i >= 0 {
				z.FirstNonZero = off + int64(i)
				z.Regions++
				return z, nil
			}
			off += n
		}
		z.Regions++
	}
	return z, nil
}

func firstNonZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}
