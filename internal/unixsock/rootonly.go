package unixsock

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RefusedWarnEvery bounds the warnings about a refused peer, per uid: a
// local user looping on connect must not flood the journal.
const RefusedWarnEvery = 10 * time.Second

// RootOnly serves only peers whose uid is root (SO_PEERCRED). The
// socket's mode (0600) is not enough: a non-root process with
// CAP_DAC_OVERRIDE connects through it. Refusals are logged at most once
// per RefusedWarnEvery per uid.
func RootOnly(ln net.Listener, log *slog.Logger, now func() time.Time) net.Listener {
	if now == nil {
		now = time.Now
	}
	return &rootOnly{Listener: ln, warn: newPeerWarnings(log.With("socket", ln.Addr().String()), now, RefusedWarnEvery)}
}

type rootOnly struct {
	net.Listener
	warn *peerWarnings
}

func (l *rootOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, ok := PeerUID(c)
		if !ok || uid != 0 {
			l.warn.refused(uid)
			c.Close()
			continue
		}
		return c, nil
	}
}

// PeerUID is the uid of a unix connection's peer, by SO_PEERCRED; false
// when it cannot be read (uid is then -1).
func PeerUID(c net.Conn) (int64, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return -1, false
	}
	return int64(cred.Uid), true
}

// peerWarnings logs a refused peer at most once per interval per uid,
// with the count of refusals not logged since the last warning.
type peerWarnings struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	uids map[int64]*peerWarning
}

type peerWarning struct {
	last       time.Time
	suppressed int
}

// peerWarningsKept bounds the per-uid memory: past it, the uids whose
// interval is over and that have nothing left to report are forgotten.
const peerWarningsKept = 1024

func newPeerWarnings(log *slog.Logger, now func() time.Time, every time.Duration) *peerWarnings {
	return &peerWarnings{log: log, now: now, every: every, uids: map[int64]*peerWarning{}}
}

func (p *peerWarnings) refused(uid int64) {
	p.mu.Lock()
	now := p.now()
	w := p.uids[uid]
	if w != nil && now.Sub(w.last) < p.every {
		w.suppressed++
		p.mu.Unlock()
		return
	}
	if len(p.uids) >= peerWarningsKept {
		for u, o := range p.uids {
			if o.suppressed == 0 && now.Sub(o.last) >= p.every {
				delete(p.uids, u)
			}
		}
	}
	suppressed := 0
	if w != nil {
		suppressed = w.suppressed
	}
	p.uids[uid] = &peerWarning{last: now}
	p.mu.Unlock()
	attrs := []any{"uid", uid}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed, "interval", p.every)
	}
	p.log.Warn("refused a non-root client on the socket", attrs...)
}
