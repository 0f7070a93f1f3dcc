package blockfs

// How the probe reads: its windows together, and each once.

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// countingReader counts reads, which the probe makes concurrently.
type countingReader struct {
	r            io.ReaderAt
	mu           sync.Mutex
	reads, bytes int
}

func (c *countingReader) ReadAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	c.reads++
	c.bytes += len(b)
	c.mu.Unlock()
	return c.r.ReadAt(b, off)
}

// slowReader takes a while for each read, as a cold device does, and
// counts how many reads overlap. Run in a synctest bubble, its wait is
// on the bubble's clock, which moves only once every read under way has
// begun: reads that go out together all overlap, and reads made one
// after another never do, however busy the machine.
type slowReader struct {
	r              io.ReaderAt
	mu             sync.Mutex
	inFlight, most int
}

func (s *slowReader) ReadAt(b []byte, off int64) (int, error) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return s.r.ReadAt(b, off)
}

// The probe's reads of a device go out together, not one after another:
// each is a round trip through the device's driver (a loop device's
// worker), and a dozen in a row made the probe slower than the mount
// after it. What it finds is the same.
func TestProbeReadsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := make([]byte, 64*mib)
		s := &slowReader{r: bytes.NewReader(dev)}
		if sigs, err := Probe(s, int64(len(dev))); err != nil || len(sigs) != 0 {
			t.Fatalf("Probe(blank) = %v, %v", sigs, err)
		}
		if s.most < 4 {
			t.Errorf("at most %d reads of the probe overlapped, want the windows read together", s.most)
		}
		// A magic in a window read ahead is still found, at its offset.
		copy(dev[0x200000:], "SKUL\xba\xbe")
		sigs, err := Probe(&slowReader{r: bytes.NewReader(dev)}, int64(len(dev)))
		if err != nil || len(sigs) != 1 || sigs[0].Type != "crypto_LUKS" || sigs[0].Offset != 0x200000 {
			t.Errorf("Probe found %+v, %v; want the LUKS2 secondary header at 2 MiB", sigs, err)
		}
	})
}

// Each read of a cold device is a round trip through its driver: the
// probe of a blank device reads each window of it once, not once per
// magic (it made 35 reads), and still finds what lies anywhere in
// a window.
func TestProbeReadsEachWindowOnce(t *testing.T) {
	dev := make([]byte, 64*mib)
	c := &countingReader{r: bytes.NewReader(dev)}
	if sigs, err := Probe(c, int64(len(dev))); err != nil || len(sigs) != 0 {
		t.Fatalf("Probe(blank) = %v, %v", sigs, err)
	}
	if c.reads > 12 {
		t.Errorf("the probe of a blank device made %d reads, want at most 12", c.reads)
	}
	// Far from the start magics lie alone: a 64 KiB window read for
	// each made the probe read 576 KiB of every device.
	if c.bytes > 128*kib {
		t.Errorf("the probe of a blank device read %d KiB, want at most 128", c.bytes/kib)
	}
	copy(dev[1024+0x38:], []byte{0x53, 0xEF}) // ext2/3/4 magic
	sigs, err := Probe(bytes.NewReader(dev), int64(len(dev)))
	if err != nil || len(sigs) == 0 {
		t.Fatalf("Probe found %v, %v; want the ext superblock at 1024", sigs, err)
	}
}
