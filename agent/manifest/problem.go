package manifest

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a manifest. Error renders
// "file:line:col: field: reason"; a problem about a whole file or
// directory (its mode, its size) has no position and renders "file: reason".
type Problem struct {
	File         string
	Line, Column int // 1-based; 0 when the problem concerns the whole file
	Field        string
	Reason       string
	// Warning marks a problem that refuses nothing: the object is accepted
	// and waits (a Mount whose volume is not declared yet). Its Reason
	// starts with "waiting:".
	Warning bool
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		col := p.Column
		if col < 1 {
			col = 1
		}
		fmt.Fprintf(&b, ":%d:%d", p.Line, col)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Reason)
	return b.String()
}

// Options tune how strictly manifests are read.
type Options struct {
	// StateDir holds the staging mounts; targets on, under or above it are
	// forbidden. Empty skips that check.
	StateDir string
	// CheckOwnership refuses files and directories not owned by root or
	// writable by group or others (sshd's StrictModes). The agent and
	// `validate` run as root set it; unit tests may leave it off.
	CheckOwnership bool
	// Kinds are the source kinds this build knows (kinds.All); a source
	// of any other kind is refused.
	Kinds Kinds
	// CacheFile keeps the parse of each file across restarts (Builder.Save);
	// "" keeps it in memory only.
	CacheFile string
}

// DefaultDirs returns the drop-in directories in precedence order: a file
// in a later directory replaces the file of the same name in an earlier one.
func DefaultDirs() []string {
	return []string{"/usr/lib/volumed/volumes.d", "/etc/volumed/volumes.d", "/run/volumed/volumes.d"}
}

// Limits on one manifest file; they bound the work a hostile or broken
// file can cause.
const (
	MaxFileSize  = 1 << 20
	MaxDocuments = 100
	MaxDepth     = 16
	MaxProblems  = 50 // reported per file
)
