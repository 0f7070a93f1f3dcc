package lvm

import (
	"context"
	"fmt"
	"strconv"

	"github.com/volumed/volumed/internal/crashpoint"
)

// Round is size as lvm2 makes it in a VG of extent bytes per extent:
// rounded up to a whole extent.
func Round(size, extent int64) int64 {
	if extent <= 0 || size%extent == 0 {
		return size
	}
	return (size/extent + 1) * extent
}

// Extend says whether lv must be extended to w's size (already Round-ed): only an LV
// volumed created for w's volume, only ever larger. A smaller size asked
// for is an error naming both sizes (lvreduce would cut the filesystem
// on it); an LV volumed did not create is never extended, whatever size
// the manifest asks.
func Extend(w Want, lv LV) (bool, error) {
	switch {
	case lv.Size == w.Size:
		return false, nil
	case Owner(lv) != w.Volume:
		return false, fmt.Errorf("LV %s is %d bytes, the manifest asks for %d: volumed never resizes an LV it did not create (no %s tag); resize it by hand, or set size to %d", lv.Ref(), lv.Size, w.Size, Tag(w.Volume), lv.Size)
	case lv.Size > w.Size:
		return false, fmt.Errorf("LV %s is %d bytes, the manifest asks for %d: volumed never shrinks an LV (the filesystem on it would be cut); set size to at least %d", lv.Ref(), lv.Size, w.Size, lv.Size)
	}
	return true, nil
}

// ExtendArgs extends lv to size bytes (lvm2 rounds up to the extent).
// Without --resizefs: the filesystem is grown by the core afterwards,
// with the tool it uses for every source.
func ExtendArgs(lv LV, size int64) []string {
	return []string{"lvextend", "--size", strconv.FormatInt(size, 10) + "b", lv.Ref()}
}

// Grow extends the LV to w's size when Extend says so, and says whether
// it did. The grow operation's intent is on disk: a crash after lvextend
// leaves the LV at its new size, which the next check sees (no second
// lvextend) before it grows the filesystem.
func (t Tool) Grow(ctx context.Context, w Want, lv LV) (bool, error) {
	ok, err := Extend(w, lv)
	if !ok || err != nil {
		return false, err
	}
	crashpoint.HitFor("lvextend", "after-intent", w.Volume)
	if _, err = t.run(ctx, "extend LV "+lv.Ref(), ExtendArgs(lv, w.Size)); err != nil {
		return false, err
	}
	crashpoint.HitFor("lvextend", "after-kernel", w.Volume)
	return true, nil
}
