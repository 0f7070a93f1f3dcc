package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/volumed/volumed/drivers/blockfs"
)

// blankCost measures the blank rule on an all-zero loop device of size
// bytes, the worst case (no signature ends the look early): volumed's
// probe, blkid -p, sysfs, and the zero-read of the ends and a sample,
// with O_DIRECT. It prints the median of runs.
func blankCost(work string, size int64, runs int) {
	img := filepath.Join(work, "blank.img")
	f, err := os.Create(img)
	check(err)
	check(f.Truncate(size))
	check(f.Close())
	out, err := exec.Command("losetup", "-f", "--show", "--direct-io=on", img).CombinedOutput()
	check(err)
	dev := strings.TrimSpace(string(out))
	defer func() { _ = exec.Command("losetup", "-d", dev).Run() }()

	var took []time.Duration
	var read int64
	for range runs {
		start := time.Now()
		facts, err := blockfs.Examine(context.Background(), dev, blockfs.ExamineOptions{})
		check(err)
		took = append(took, time.Since(start))
		read = facts.Zeros.Bytes
		if facts.Zeros.FirstNonZero >= 0 || len(facts.Signatures) > 0 {
			fail("the bench's zero image is not blank")
		}
	}
	slices.Sort(took)
	zstart := time.Now()
	_, err = blockfs.ReadZerosAt(dev)
	check(err)
	fmt.Printf("blank rule on an all-zero %d GiB loop device: %v median of %d (probe, blkid -p, sysfs, zero-read of %.1f MiB; the zero-read alone %v)\n",
		size>>30, took[len(took)/2].Round(100*time.Microsecond), runs, float64(read)/(1<<20), time.Since(zstart).Round(100*time.Microsecond))
}
