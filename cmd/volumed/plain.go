package main

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
	"github.com/volumed/volumed/store"
)

// dirAttacher serves `source.directory`: a host directory, created with
// the manifest's mode and owner when missing, bound at the staging path.
// There is nothing to attach or detach; the directory is never removed.
type dirAttacher struct{}

func (dirAttacher) found(p string) agent.Found {
	return agent.Found{Device: p, Identity: "directory:" + p, Owned: true}
}

func (a dirAttacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	p := d.Spec.Source.Directory.Path
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

func (a dirAttacher) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	src := d.Spec.Source.Directory
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

func (dirAttacher) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	fi, err := os.Lstat(a.Device)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return a.Device, fi.IsDir(), nil
}

func (dirAttacher) Detach(context.Context, store.Attachment, []store.Attachment) error { return nil }

func (dirAttacher) Stage(_ context.Context, d *agent.Desired, staging string) error {
	return mount.SafeBind(d.Spec.Source.Directory.Path, "", staging, mount.BindOptions{})
}

func (dirAttacher) IsStaged(d *agent.Desired, staging string) bool {
	st, err := mount.At(staging)
	if err != nil || !st.Root {
		return false
	}
	dir, err := mount.At(d.Spec.Source.Directory.Path)
	return err == nil && st.SameFile(dir)
}

// tmpfsAttacher serves `source.tmpfs`: a tmpfs of the manifest's size
// mounted at the staging path. Its content lives as long as the mount.
type tmpfsAttacher struct{}

func (tmpfsAttacher) found(d *agent.Desired) agent.Found {
	return agent.Found{Device: "tmpfs", Identity: "tmpfs:" + d.Name, Owned: true}
}

func (t tmpfsAttacher) Find(_ context.Context, d *agent.Desired) ([]agent.Found, error) {
	return []agent.Found{t.found(d)}, nil
}

func (t tmpfsAttacher) Attach(_ context.Context, d *agent.Desired) (agent.Found, error) {
	return t.found(d), nil
}

func (tmpfsAttacher) Verify(_ context.Context, a store.Attachment) (string, bool, error) {
	return a.Device, true, nil
}

func (tmpfsAttacher) Detach(context.Context, store.Attachment, []store.Attachment) error { return nil }

func (tmpfsAttacher) Stage(_ context.Context, d *agent.Desired, staging string) error {
	size := strconv.FormatInt(d.Spec.Source.Tmpfs.SizeBytes, 10)
	return mount.SafeMountDevice("tmpfs", staging, "tmpfs", []string{"size=" + size, "mode=0755"})
}

func (tmpfsAttacher) IsStaged(_ *agent.Desired, staging string) bool {
	m, err := mount.Lookup(staging)
	return err == nil && m != nil && m.Mountpoint == staging && m.FSType == "tmpfs"
}
