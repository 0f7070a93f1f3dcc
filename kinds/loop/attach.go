package loop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/agent"
	loopdev "github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// attacher adapts drivers/loop to the core's Attacher.
type attacher struct {
	tag string
	// idx answers the Finds of many volumes from one sysfs pass; the
	// attacher's own attaches are noted in it.
	idx *loopdev.Index
}

func newIndex() *loopdev.Index { return new(loopdev.Index) }

func (l attacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return nil, err
	}
	devs, err := l.idx.Find(src.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]agent.Found, 0, len(devs))
	for _, dev := range devs {
		out = append(out, agent.Found{Device: dev.Path, Identity: dev.Identity(), Owned: dev.Tag == l.tag})
	}
	return out, nil
}

func (l attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return agent.Found{}, err
	}
	created := false
	if src.Create != nil {
		if err := checkRoom(src, false); err != nil {
			return agent.Found{}, err
		}
		if created, err = loopdev.EnsureImage(src.File, src.Create.SizeBytes); err != nil {
			return agent.Found{}, err
		}
	} else if _, err := os.Stat(src.File); err != nil {
		return agent.Found{}, fmt.Errorf("image %s: %w (set source.loop.create.size to have it created)", src.File, err)
	}
	dev, err := loopdev.Attach(ctx, loopdev.Options{File: src.File, ReadOnly: src.ReadOnly, Tag: l.tag})
	if err != nil {
		l.idx.Invalidate() // it may have bound a device and then failed
		return agent.Found{}, err
	}
	l.idx.Note(*dev)
	return agent.Found{Device: dev.Path, Identity: dev.Identity(), Owned: true, Created: created}, nil
}

// byIdentity finds the bound loop device with the given identity: the
// recorded device name is a hint, the backing file's device and inode
// decide. The path is not compared for a device we made: an image moved
// away (or deleted) under its device is still that device's file, and
// losing track of it would attach a second device to whatever the path
// names now. But device and inode numbers name a file only while it
// lives: across a reboot the image may be gone and its inode reused by
// another file (or its filesystem's device number given to another), on
// a device someone else attached. So a device we made must carry our tag
// (tag), and one we found and adopted must still read the recorded path.
func byIdentity(a store.Attachment, tag string) (*loopdev.Device, error) {
	if _, _, _, ok := loopdev.ParseIdentity(a.Identity); !ok {
		return nil, fmt.Errorf("recorded identity %q is not a loop device's", a.Identity)
	}
	same := func(d *loopdev.Device) bool { return d != nil && isRecorded(a, tag, *d) }
	if n, ok := loopNumber(a.Device); ok {
		dev, err := loopdev.Get(n)
		if err != nil {
			return nil, err
		}
		if same(dev) {
			return dev, nil
		}
	}
	devs, err := loopdev.List()
	if err != nil {
		return nil, err
	}
	for i := range devs {
		if same(&devs[i]) {
			return &devs[i], nil
		}
	}
	return nil, nil
}

// isRecorded reports whether d is the device the record a names (see
// byIdentity); tag is ours.
func isRecorded(a store.Attachment, tag string, d loopdev.Device) bool {
	file, bdev, bino, ok := loopdev.ParseIdentity(a.Identity)
	if !ok || d.BackingDev != bdev || d.BackingIno != bino {
		return false
	}
	if a.Owned {
		return d.Tag == tag
	}
	return d.BackingFile == file
}

// CheckBacking compares the file at the image's path with the file the
// device reads: one stat, no device I/O. Which path is checkedPath's
// choice.
func (attacher) CheckBacking(d *agent.Desired, a store.Attachment) (*agent.Problem, error) {
	recorded, bdev, bino, ok := loopdev.ParseIdentity(a.Identity)
	if !ok {
		return nil, fmt.Errorf("recorded identity %q is not a loop device's", a.Identity)
	}
	wanted, key := "", ""
	if d != nil {
		if src, err := kind.Spec[Source](d, Name); err == nil {
			wanted, key = src.File, d.Caps.Key
		}
	}
	file := checkedPath(wanted, key, a.Source, recorded)
	fdev, fino, err := loopdev.FileIdentity(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &agent.Problem{Reason: "ImageDeleted", Message: fmt.Sprintf(
			"the image %s was deleted or moved away while %s still uses it (inode %d:%d): the volume's data now lives only in that file, which is freed when the device is detached (removing the manifest does that); copy the data out of the mounted volume (or from %s) and put an image back at %s; volumed attaches and formats nothing for this volume meanwhile",
			file, a.Device, bdev, bino, a.Device, file)}, nil
	case err != nil:
		return nil, err
	case fdev == bdev && fino == bino:
		return nil, nil
	}
	return &agent.Problem{Reason: "ImageReplaced", Message: fmt.Sprintf(
		"the image %s was replaced: the path names another file (inode %d:%d) than the one %s still uses (inode %d:%d); the volume stays on the old file and volumed neither attaches nor formats the new one; to switch to it, copy out what you need, remove the manifest (the old device is detached) and add it back",
		file, fdev, fino, a.Device, bdev, bino)}, nil
}

// checkedPath is the path whose file must be the device's: the
// manifest's image (wanted, under the attachment key key) while the
// device is attached for it, so that a file put at that path in place
// of the image is seen. After an edit of loop.file (the attachment was
// made for another source: attachedFor) the device still reads the old
// image, recorded: that one is checked and named, and the edit is the
// PendingChange condition's to report. A volume going away (no wanted
// path) is checked at the recorded path too.
func checkedPath(wanted, key, attachedFor, recorded string) string {
	if wanted == "" || (attachedFor != "" && attachedFor != key) {
		return recorded
	}
	return wanted
}

func loopNumber(dev string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/loop"))
	return n, err == nil && strings.HasPrefix(dev, "/dev/loop")
}

func (l attacher) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	dev, err := byIdentity(a, l.tag)
	if err != nil || dev == nil {
		return "", false, err
	}
	return dev.Path, true, nil
}

// Grow extends the image to the manifest's size (never shrinks it) and
// has the loop device pick the new size up.
func (l attacher) Grow(ctx context.Context, d *agent.Desired, a store.Attachment) error {
	src, err := kind.Spec[Source](d, Name)
	if err != nil || src.Create == nil {
		return err
	}
	dev, err := byIdentity(a, l.tag)
	if err != nil {
		return err
	}
	if dev == nil {
		return fmt.Errorf("loop device of %s is gone", src.File)
	}
	if err := checkRoom(src, true); err != nil {
		return err
	}
	_, err = loopdev.Grow(ctx, *dev, src.Create.SizeBytes)
	return err
}

// checkRoom refuses an image size the filesystem holding the image
// cannot take, unless the manifest opts in to overcommitting it. An
// existing image is checked only when it is to grow: it is never
// resized at attach.
func checkRoom(src *Source, growing bool) error {
	if src.Create.Overcommit {
		return nil
	}
	if st, err := os.Lstat(src.File); err == nil && (!growing || st.Size() >= src.Create.SizeBytes) {
		return nil
	}
	err := loopdev.CheckRoom(src.File, src.Create.SizeBytes)
	if errors.Is(err, loopdev.ErrNoRoom) {
		return fmt.Errorf("source.loop.create.size %s refused: %w; a sparse image that runs out of room corrupts the filesystem inside it: free space, lower the size, or set create.overcommit: true", src.Create.Size, err)
	}
	return err
}

// loopDetachWait bounds the wait for another opener of the device to let
// go (the driver would wait as long as ctx): a holder that stays must
// show as a failed detach naming it, not as one that never ends.
const loopDetachWait = 10 * time.Second

func (l attacher) Detach(ctx context.Context, a store.Attachment) error {
	dev, err := byIdentity(a, l.tag)
	if err != nil || dev == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, loopDetachWait)
	defer cancel()
	return kind.MarkBusy(loopdev.Detach(ctx, *dev), loopdev.ErrBusy)
}

// DetachNeedsNoIntent: a loop device is found again by its backing
// file's identity and by our tag, so its detach writes no intent.
func (attacher) DetachNeedsNoIntent() {}

func (l attacher) ListOwned(context.Context) ([]store.Attachment, error) {
	devs, err := loopdev.List()
	if err != nil {
		return nil, err
	}
	var out []store.Attachment
	for _, d := range devs {
		if d.Tag == l.tag {
			out = append(out, store.Attachment{Kind: Name, Device: d.Path, Identity: d.Identity(), Owned: true})
		}
	}
	return out, nil
}
