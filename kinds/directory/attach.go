package directory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/internal/safepath"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// attacher serves `source.directory`: a host directory, created with
// the manifest's mode and owner when missing, bound at the staging path.
// There is nothing to attach or detach; the directory is never removed.
type attacher struct{}

func (attacher) found(p string) agent.Found {
	return agent.Found{Device: p, Identity: "directory:" + p, Owned: true}
}

func (a attacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return nil, err
	}
	p := src.Path
	f, err := safepath.OpenDir(p, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f.Close()
	return []agent.Found{a.found(p)}, nil
}

func (a attacher) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return agent.Found{}, err
	}
	if src.Create == nil {
		return agent.Found{}, fmt.Errorf("directory %s does not exist (set source.directory.create to have it made)", src.Path)
	}
	f, err := safepath.OpenDir(src.Path, true)
	if err != nil {
		return agent.Found{}, err
	}
	defer f.Close()
	// Through the opened handle: the directory just made, not whatever
	// its path names by now.
	self := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	mode := os.FileMode(0o755)
	if src.Create.Mode != "" {
		m, err := manifest.ParseMode(src.Create.Mode)
		if err != nil {
			return agent.Found{}, err
		}
		mode = os.FileMode(m)
	}
	if err := os.Chown(self, src.Create.UID, src.Create.GID); err != nil {
		return agent.Found{}, fmt.Errorf("chown %s: %w", src.Path, err)
	}
	if err := os.Chmod(self, mode); err != nil {
		return agent.Found{}, fmt.Errorf("chmod %s: %w", src.Path, err)
	}
	return a.found(src.Path), nil
}

func (attacher) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	fi, err := os.Lstat(a.Device)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return a.Device, fi.IsDir(), nil
}

func (attacher) Detach(context.Context, store.Attachment) error { return nil }

func (attacher) Stage(_ context.Context, d *agent.Desired, staging string) error {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return err
	}
	return mount.SafeBind(src.Path, "", staging, mount.BindOptions{})
}

func (attacher) IsStaged(d *agent.Desired, staging string) bool {
	src, err := kind.Spec[Source](d, Name)
	if err != nil {
		return false
	}
	st, err := mount.At(staging)
	if err != nil || !st.Root {
		return false
	}
	dir, err := mount.At(src.Path)
	return err == nil && st.SameFile(dir)
}
