package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// After loop.file is edited under a live volume, the device still reads
// the old image: PendingChange says the edit waits, no BackingChanged
// calls the new path deleted, and when the old image is deleted the
// condition names that one.
func TestEditedImagePathNamesTheImageInUse(t *testing.T) {
	e, img := readyVolume(t, "e")
	edited := filepath.Join(e.images, "e-new.img")
	e.loopManifest("e", edited, "64Mi", "type: ext4")
	e.waitCondition("e", "PendingChange", edited)
	time.Sleep(2 * time.Second) // several resyncs of 300 ms
	st, err := e.status()
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(find(st, "e"), "BackingChanged"); c != nil {
		t.Errorf("BackingChanged while the old image %s is in place: %s: %s", img, c.Reason, c.Message)
	}
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	c := e.waitCondition("e", "BackingChanged", img, "deleted")
	if c.Reason != "ImageDeleted" || strings.Contains(c.Message, edited) {
		t.Errorf("the deleted image's condition: %s: %s; want ImageDeleted naming %s, not %s", c.Reason, c.Message, img, edited)
	}
}
