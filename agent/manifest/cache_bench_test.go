package manifest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// BenchmarkLoad1000 is a Load of 1000 manifests parsed fresh (a restart)
// against one whose files are all in the cache (a rescan, or what a
// cache kept across restarts could at best make a restart): what is left
// is the listing, the checks on each file, the claims and the nesting.
func BenchmarkLoad1000(b *testing.B) {
	dir := b.TempDir()
	for i := range 1000 {
		m := loopVolume(fmt.Sprintf("v%03d", i), fmt.Sprintf("/images/v%03d.img", i), fmt.Sprintf("/srv/v%03d", i))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("v%03d.yaml", i)), []byte(m), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	opts := Options{Kinds: testKinds, CheckOwnership: true}
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			if res := NewBuilder([]string{dir}, opts).Load(); len(res.Volumes) != 1000 {
				b.Fatalf("%d volumes, problems %v", len(res.Volumes), res.Problems[:1])
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		bl := NewBuilder([]string{dir}, opts)
		bl.SetClock(later)
		bl.Load()
		for b.Loop() {
			if res := bl.Load(); len(res.Volumes) != 1000 {
				b.Fatalf("%d volumes", len(res.Volumes))
			}
		}
	})
}
