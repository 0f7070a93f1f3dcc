// Package partition is the `partition` source kind: a GPT partition,
// named by its label, that volumed keeps on a whole disk
// (drivers/partition). On a blank disk a table is written; on a disk
// whose table volumed wrote, missing partitions are added; a disk with
// any other signature or a foreign table is never written, and the
// volume says why. A partition is found by its GPT name and volumed's
// type GUID, never by its number. Several partition volumes share one
// disk (that is the point); two never share a label on it. Partitions
// are never deleted: removing the volume leaves the partition and its
// data.
package partition

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	devicedrv "github.com/volumed/volumed/drivers/device"
	partdrv "github.com/volumed/volumed/drivers/partition"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds/disk"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/store"
)

// Name is the manifest key and the driver's name.
const Name = "partition"

// Source is `source.partition`.
type Source struct {
	// Disk is the whole disk the partition is on.
	Disk disk.Ref `yaml:"disk" json:"disk"`
	// Label is the partition's GPT name, unique on the disk.
	Label string `yaml:"label" json:"label"`
	// Size is the partition's size (e.g. 20Gi); exactly one of Size and
	// Grow. A larger size later enlarges it if the space after it is free.
	Size string `yaml:"size,omitempty" json:"size,omitempty"`
	// Grow: take the rest of the disk.
	Grow bool `yaml:"grow,omitempty" json:"grow,omitempty"`

	size int64
}

// Kind describes the partition source kind.
type Kind struct{}

func (Kind) Name() string              { return Name }
func (Kind) Traits() kind.Traits       { return kind.Traits{AwaitsDisk: true} }
func (Kind) New() any                  { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs { return hostcheck.Needs{} }

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "size", Check: kind.Size},
	}
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	s := spec.(*Source)
	r := s.Disk
	kind.ExactlyOne(c, "disk", kind.Field{Name: "match", Value: r.Match}, kind.Field{Name: "serial", Value: r.Serial},
		kind.Field{Name: "wwn", Value: r.WWN}, kind.Field{Name: "path", Value: r.Path})
	switch {
	case r.Match != "":
		disk.CheckMatch(c, "disk.match", r.Match)
	case r.Path != "":
		kind.DevPath(c, "disk.path", r.Path)
	}
	switch {
	case s.Grow && s.Size != "":
		c.Report("size", "set exactly one of size and grow: true")
	case !s.Grow && s.Size == "":
		c.Report("", "one of size (e.g. 20Gi) and grow: true is required")
	case s.Size != "":
		s.size = c.Size("size", s.Size)
	}
	if s.Label == "" {
		c.Report("label", "required: the partition's GPT name")
	} else if err := partdrv.ValidateWants([]partdrv.Want{{Label: s.Label, Grow: true}}); err != nil {
		c.Report("label", strings.TrimPrefix(err.Error(), "partition: "))
	}
	what := fmt.Sprintf("partition %q on %s", s.Label, r.Key())
	claims := []manifest.Claim{{Key: r.Key() + "\x00" + s.Label, Field: "label", What: what}}
	if s.Grow {
		// One partition takes the rest of a disk.
		claims = append(claims, manifest.Claim{Key: r.Key() + "\x00grow", Field: "grow", What: "the rest of " + r.Key()})
	}
	key := what
	if s.Grow {
		key += growing
	}
	return manifest.Caps{Key: key, Claims: claims}
}

func (Kind) Attacher(kind.Env) agent.Attacher { return attacher{} }

// Identity of a partition: its label on the disk's identity, e.g.
// `partition:"data"@device:serial:S3Z1`.
func Identity(label, diskIdentity string) string {
	return Name + ":" + strconv.Quote(label) + "@" + diskIdentity
}

// ParseIdentity reads an Identity back.
func ParseIdentity(id string) (label, diskIdentity string, err error) {
	rest, ok := strings.CutPrefix(id, Name+":")
	q, qerr := strconv.QuotedPrefix(rest)
	if ok && qerr == nil {
		label, _ = strconv.Unquote(q)
		if d, ok := strings.CutPrefix(rest[len(q):], "@"); ok && label != "" {
			if _, err := devicedrv.ParseIdentity(d); err == nil {
				return label, d, nil
			}
		}
	}
	return "", "", fmt.Errorf("not a partition identity: %q", id)
}

// growing ends the key of a partition that takes the rest of its disk:
// the key is kept with the attachment, which is all Refresh is handed.
const growing = ", taking the rest of the disk"

// nodeWait bounds the wait for devtmpfs to make a partition's node
// after the kernel was told of it.
const nodeWait = 10 * time.Second

type attacher struct{ rv disk.Resolver }

func spec(d *agent.Desired) (*Source, error) { return kind.Spec[Source](d, Name) }

func (a attacher) Find(ctx context.Context, d *agent.Desired) ([]agent.Found, error) {
	s, err := spec(d)
	if err != nil {
		return nil, err
	}
	dk, ok, _, err := a.rv.Resolve(ctx, s.Disk)
	if err != nil || !ok {
		return nil, err
	}
	p, ok, err := partdrv.Find(ctx, dk.Path, s.Label)
	if err != nil || !ok {
		return nil, err
	}
	if err := waitNode(ctx, p.Device); err != nil {
		return nil, err
	}
	return []agent.Found{{Device: p.Device, Identity: Identity(s.Label, dk.Identity), Reusable: true, Note: dk.Note}}, nil
}

// Attach is AttachAmong with no other volume on the disk.
func (a attacher) Attach(ctx context.Context, d *agent.Desired) (agent.Found, error) {
	return a.AttachAmong(ctx, d, nil)
}

// AttachAmong writes what the disk lacks for the partition (the table,
// the entry, the kernel's view) and waits for its node. The partitions
// the other volumes on the same disk want are laid out in the same write
// (sized ones first, by volume name, the one that grows last), so a
// partition that takes the rest of the disk never takes their room,
// whichever volume attaches first. Apply writes the table at most once
// and is idempotent: an attach redone after a crash converges without
// writing the disk again.
func (a attacher) AttachAmong(ctx context.Context, d *agent.Desired, others []*agent.Desired) (agent.Found, error) {
	s, err := spec(d)
	if err != nil {
		return agent.Found{}, err
	}
	dk, ok, why, err := a.rv.Resolve(ctx, s.Disk)
	switch {
	case err != nil:
		return agent.Found{}, err
	case !ok:
		return agent.Found{}, s.Disk.Waiting(fmt.Errorf("waiting for the disk: %s", why))
	}
	own, err := s.want()
	if err != nil {
		return agent.Found{}, err
	}
	// by volume name: the core hands others sorted, d goes in its place.
	type named struct {
		name string
		want partdrv.Want
	}
	all := []named{{d.Name, own}}
	for _, o := range others {
		so, err := spec(o)
		if err != nil || so.Disk != s.Disk || so.Label == s.Label {
			continue
		}
		w, err := so.want()
		if err != nil || (w.Grow && own.Grow) {
			continue // only one may grow; a second is refused at load
		}
		all = append(all, named{o.Name, w})
	}
	slices.SortFunc(all, func(x, y named) int { return strings.Compare(x.name, y.name) })
	wants := make([]partdrv.Want, len(all))
	for i, n := range all {
		wants[i] = n.want
	}
	if err := partdrv.ValidateWants(wants); err != nil {
		wants = []partdrv.Want{own} // the others' conflicts are theirs to report
	}
	wants = ordered(wants)
	res, err := partdrv.Apply(ctx, dk.Path, wants)
	if err != nil {
		if errors.Is(err, partdrv.ErrRefused) {
			return agent.Found{}, fmt.Errorf("not writing disk %s: %w", dk.Path, err)
		}
		return agent.Found{}, err
	}
	for _, r := range res.Plan.Refused() {
		if r.Label == s.Label {
			return agent.Found{}, fmt.Errorf("partition %q on %s: %s", r.Label, dk.Path, r.Reason)
		}
	}
	i := slices.IndexFunc(res.Partitions, func(p partdrv.Partition) bool { return p.Label == s.Label })
	if i < 0 {
		return agent.Found{}, fmt.Errorf("partition %q on %s: not on the disk after it was written", s.Label, dk.Path)
	}
	p := res.Partitions[i]
	if err := waitNode(ctx, p.Device); err != nil {
		return agent.Found{}, err
	}
	return agent.Found{Device: p.Device, Identity: Identity(s.Label, dk.Identity), Reusable: true, Note: dk.Note}, nil
}

// ordered puts sized partitions before the one that grows, keeping
// their order otherwise.
func ordered(wants []partdrv.Want) []partdrv.Want {
	slices.SortStableFunc(wants, func(x, y partdrv.Want) int {
		switch {
		case x.Grow == y.Grow:
			return 0
		case x.Grow:
			return 1
		}
		return -1
	})
	return wants
}

// want is the partition the source asks for. A volume rebuilt from an
// intent keeps the size as written, not parsed.
func (s *Source) want() (partdrv.Want, error) {
	w := partdrv.Want{Label: s.Label, Size: s.size, Grow: s.Grow}
	if w.Size == 0 && !w.Grow {
		n, err := size.Parse(s.Size)
		if err != nil {
			return partdrv.Want{}, fmt.Errorf("partition %q size: %w", s.Label, err)
		}
		w.Size = n
	}
	return w, nil
}

func (a attacher) Verify(ctx context.Context, at store.Attachment) (string, bool, error) {
	label, did, err := ParseIdentity(at.Identity)
	if err != nil {
		return "", false, err
	}
	path, ok, err := a.rv.Locate(did)
	if err != nil || !ok {
		return "", false, err
	}
	p, ok, err := partdrv.Find(ctx, path, label)
	return p.Device, ok, err
}

// Refresh grows a partition that takes the rest of its disk into what
// the disk gained (the table rewritten, the kernel told); the core then
// grows the filesystem onto it as for any device that grew. It runs at
// the resync: reading the table is cheap, and nothing is written unless
// the disk grew by 1 MiB or more.
func (a attacher) Refresh(ctx context.Context, at store.Attachment) error {
	if !strings.HasSuffix(at.Source, growing) {
		return nil
	}
	label, did, err := ParseIdentity(at.Identity)
	if err != nil {
		return err
	}
	path, ok, err := a.rv.Locate(did)
	if err != nil || !ok {
		return err
	}
	if _, ok, err := partdrv.Find(ctx, path, label); err != nil || !ok {
		return err // gone: the drift check says so; never made here
	}
	res, err := partdrv.Apply(ctx, path, []partdrv.Want{{Label: label, Grow: true}})
	if err != nil {
		return err
	}
	for _, r := range res.Plan.Refused() {
		return fmt.Errorf("grow partition %q on %s: %s", label, path, r.Reason)
	}
	return nil
}

// Detach leaves the partition: its data is the user's to delete.
func (attacher) Detach(context.Context, store.Attachment) error { return nil }

// waitNode waits (bounded) for devtmpfs to make a node the kernel has
// just announced: it does so asynchronously.
func waitNode(ctx context.Context, dev string) error {
	ctx, cancel := context.WithTimeout(ctx, nodeWait)
	defer cancel()
	for {
		if _, err := os.Stat(dev); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partition node %s did not appear within %s", dev, nodeWait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
