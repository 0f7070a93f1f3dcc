package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/volumed/volumed/store"
)

// oneDisk stands in for a disk selector that two volumes' expressions
// both select: every volume finds (or attaches) the same disk.
type oneDisk struct{ present bool }

func (o *oneDisk) found() Found {
	return Found{Device: "/dev/sdz", Identity: "device:serial:Z", Reusable: true}
}

func (o *oneDisk) Find(context.Context, *Desired) ([]Found, error) {
	if !o.present {
		return nil, nil
	}
	return []Found{o.found()}, nil
}

func (o *oneDisk) Attach(context.Context, *Desired) (Found, error) { return o.found(), nil }

func (o *oneDisk) Verify(context.Context, store.Attachment) (string, bool, error) {
	return "/dev/sdz", true, nil
}

func (o *oneDisk) Detach(context.Context, store.Attachment, []store.Attachment) error { return nil }

// Two volumes never record one disk: the first keeps it, the newcomer is
// refused, whether the disk was found in place or handed by Attach.
func TestDiskHeldByAnotherVolumeRefused(t *testing.T) {
	ctx := context.Background()
	for _, present := range []bool{true, false} {
		a := sessionAgent(t, nil)
		a.cfg.Attachers = map[string]Attacher{"fake": &oneDisk{present: present}}
		if err := a.opAttach(ctx, netVolume("first")); err != nil {
			t.Fatal(err)
		}
		err := a.opAttach(ctx, netVolume("second"))
		if err == nil || !strings.Contains(err.Error(), "already volume first's") {
			t.Errorf("present %v: second volume's attach: %v, want refused", present, err)
		}
		if rec := a.state.Get("second"); rec != nil && rec.Attachment != nil {
			t.Errorf("present %v: second volume recorded %+v", present, rec.Attachment)
		}
		// The first volume attaching again (a retry) keeps its disk.
		if err := a.opAttach(ctx, netVolume("first")); err != nil {
			t.Errorf("present %v: first volume's retry: %v", present, err)
		}
	}
}
