package blockfs

import (
	"bytes"
	"testing"
)

// The blank rule's zero-read: the ends and a seeded sample, each region
// inside the device, the cost bounded whatever the size.
func TestZeroRegions(t *testing.T) {
	for _, size := range []int64{0, 4096, 2 << 20, 2<<20 + 4096, 64 << 20, 1 << 40} {
		regs := ZeroRegions(size, ZeroSeed(size))
		var total int64
		for _, r := range regs {
			if r[0] < 0 || r[1] < 0 || r[0]+r[1] > size || r[0]%4096 != 0 {
				t.Errorf("size %d: region %v outside the device or unaligned", size, r)
			}
			total += r[1]
		}
		if size <= 2<<20 && total != size {
			t.Errorf("size %d: a small device is read whole, got %d bytes", size, total)
		}
		if max := int64(2<<20 + zeroSamples*zeroBlock); total > max {
			t.Errorf("size %d: reads %d bytes, more than %d", size, total, max)
		}
	}
}

func TestReadZeros(t *testing.T) {
	const size = 64 << 20
	dev := make([]byte, size)
	z, err := ReadZeros(bytes.NewReader(dev), size, ZeroSeed(size))
	if err != nil || !z.Read || z.FirstNonZero != -1 || z.Regions != 2+zeroSamples {
		t.Fatalf("all zeros: %+v, %v", z, err)
	}
	// Data in the last MiB only: found there, past the first MiB.
	dev[size-10] = 1
	z, err = ReadZeros(bytes.NewReader(dev), size, ZeroSeed(size))
	if err != nil || z.FirstNonZero != size-10 {
		t.Fatalf("data at the end: %+v, %v", z, err)
	}
	// Data in a sampled block in the middle.
	dev[size-10] = 0
	mid := ZeroRegions(size, ZeroSeed(size))[5]
	dev[mid[0]+7] = 0xff
	z, err = ReadZeros(bytes.NewReader(dev), size, ZeroSeed(size))
	if err != nil || z.FirstNonZero != mid[0]+7 {
		t.Fatalf("data in a sampled block at %d: %+v, %v", mid[0], z, err)
	}
}
