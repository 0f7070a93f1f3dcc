package agent

import (
	"log/slog"
	"sync"
)

// onceLog says a recurring problem once, when it appears or changes, and
// once when it is gone: a check repeated at every resync must neither
// drop its errors nor repeat them a thousand times.
type onceLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]string
}

func newOnceLog(log *slog.Logger) *onceLog { return &onceLog{log: log, last: map[string]string{}} }

// failed logs err for key (a check of one volume) unless it was the last
// thing said for key.
func (o *onceLog) failed(key, msg string, err error, args ...any) {
	o.mu.Lock()
	same := o.last[key] == err.Error()
	o.last[key] = err.Error()
	o.mu.Unlock()
	if !same {
		o.log.Warn(msg, append(args, "error", err)...)
	}
}

// ok says, once, that the check of key works again.
func (o *onceLog) ok(key, msg string, args ...any) {
	o.mu.Lock()
	_, was := o.last[key]
	delete(o.last, key)
	o.mu.Unlock()
	if was {
		o.log.Info(msg, args...)
	}
}
