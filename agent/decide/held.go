package decide

import (
	"path"
	"slices"
	"sort"
	"strings"
)

// heldPaths are the published targets: who holds each, and the paths
// sorted, so that the questions below cost a lookup, not a walk of every
// target (a pass over n volumes would cost n²). A path two records hold
// (a bind found on top of another's) has both holders, in order, so
// that what Plan decides never hangs on a map's order.
type heldPaths struct {
	by     map[string][]string
	sorted []string
}

func newHeld() *heldPaths { return &heldPaths{by: map[string][]string{}} }

func (h *heldPaths) add(p, volume string) {
	holders := h.by[p]
	i, found := slices.BinarySearch(holders, volume)
	if found {
		return
	}
	if len(holders) == 0 {
		j, _ := slices.BinarySearch(h.sorted, p)
		h.sorted = slices.Insert(h.sorted, j, p)
	}
	h.by[p] = slices.Insert(holders, i, volume)
}

func (h *heldPaths) remove(p, volume string) {
	holders := h.by[p]
	i, found := slices.BinarySearch(holders, volume)
	if !found {
		return
	}
	holders = slices.Delete(holders, i, i+1)
	if len(holders) > 0 {
		h.by[p] = holders
		return
	}
	delete(h.by, p)
	if j, ok := slices.BinarySearch(h.sorted, p); ok {
		h.sorted = slices.Delete(h.sorted, j, j+1)
	}
}

// heldByOther: a volume other than name holds p.
func (h *heldPaths) heldByOther(p, name string) bool {
	for _, v := range h.by[p] {
		if v != name {
			return true
		}
	}
	return false
}

// coversHeld: some other published target lies inside p, so unmounting
// p would fail busy (or hide it); p waits until that one is gone.
func coversHeld(p string, held *heldPaths) bool {
	// The paths under p sort together, right after p + "/".
	under := strings.TrimSuffix(p, "/") + "/"
	i := sort.SearchStrings(held.sorted, under)
	return i < len(held.sorted) && strings.HasPrefix(held.sorted[i], under)
}

// enclosedBy: volume holds a published target that p lies inside.
func enclosedBy(p, volume string, held *heldPaths) bool {
	for q := range ancestors(p) {
		if slices.Contains(held.by[q], volume) {
			return true
		}
	}
	return false
}

// ancestors yields the directories above p, nearest first.
func ancestors(p string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for q, parent := p, path.Dir(p); parent != q; q, parent = parent, path.Dir(parent) {
			if !yield(parent) {
				return
			}
		}
	}
}
