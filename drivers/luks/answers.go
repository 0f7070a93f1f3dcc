package luks

import (
	"errors"
	"sync"

	"github.com/volumed/volumed/drivers/tang"
)

// Answers remembers which Tang servers left their last request
// unanswered, so that a threshold that cannot be met without such a
// server asks it first (askOrder): while one server of "2 of near and
// far" is down, each retry of the open costs that server's refused
// request, not an exchange with the other before it. It holds no secret,
// only servers' URLs: what a server gave is never kept past the
// operation that asked for it. The zero value is ready; nil remembers
// nothing.
type Answers struct {
	mu   sync.Mutex
	down map[string]bool
}

// note records how a request to the server at url went: unanswered
// (tang.UnreachableError), or answered (nil, or any other error: the
// server said something).
func (a *Answers) note(url string, err error) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var ue *tang.UnreachableError
	if !errors.As(err, &ue) {
		delete(a.down, url)
		return
	}
	if a.down == nil {
		a.down = map[string]bool{}
	}
	a.down[url] = true
}

// unanswered says whether the last request to the server at url went
// unanswered.
func (a *Answers) unanswered(url string) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.down[url]
}

// askOrder is the order in which a threshold of t asks for its shares,
// given which need no network (local) and which a server left
// unanswered last time. Those that cost least come first: local shares
// (a TPM's), then the network's, the shares' own order kept otherwise.
// An unanswered server's share comes last, not asked at all when the
// others meet t; but when t cannot be met without it, it comes first, as
// its failure ends the attempt before any other share is asked.
func askOrder(t int, local, unanswered []bool) []int {
	var down, near, far []int
	for i := range local {
		switch {
		case unanswered[i]:
			down = append(down, i)
		case local[i]:
			near = append(near, i)
		default:
			far = append(far, i)
		}
	}
	up := append(near, far...)
	if len(up) >= t {
		return append(up, down...)
	}
	return append(down, up...)
}
