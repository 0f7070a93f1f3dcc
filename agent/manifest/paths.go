package manifest

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/volumed/volumed/internal/safepath"
)

// Paths that belong to the kernel or to volumed itself: nothing is
// published on or under them.
var forbiddenTargets = []string{"/proc", "/sys", "/dev", "/run/volumed"}

// checkSubPath refuses what can only be an escape or a mistake; the agent
// still resolves the path beneath the volume without following symlinks,
// which is what stops a symlink inside the volume from leading out.
func checkSubPath(p string) string {
	switch {
	case filepath.IsAbs(p):
		return fmt.Sprintf("must be relative to the volume's root, got %q", p)
	case filepath.Clean(p) != p || p == ".":
		return fmt.Sprintf("must be a clean relative path (did you mean %q?)", filepath.Clean(p))
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Sprintf("must not contain \"..\", got %q", p)
		}
	}
	return ""
}

// checkPath requires an absolute, clean path: what is written is what is
// compared when looking for conflicts.
func checkPath(p string) string {
	switch {
	case p == "":
		return "required"
	case !filepath.IsAbs(p):
		return fmt.Sprintf("must be an absolute path, got %q", p)
	case filepath.Clean(p) != p:
		return fmt.Sprintf("must be a clean path (did you mean %q?)", filepath.Clean(p))
	}
	return ""
}

// checkTarget applies the rules for a place a volume is published.
func checkTarget(p, stateDir string) string {
	if r := checkPath(p); r != "" {
		return r
	}
	if p == "/" {
		return "must not be /"
	}
	for _, f := range forbiddenTargets {
		if safepath.Within(p, f) {
			return fmt.Sprintf("must not be %s or under it", f)
		}
		if safepath.Within(f, p) {
			return fmt.Sprintf("must not contain %s (it would hide it)", f)
		}
	}
	if stateDir != "" {
		sd := filepath.Clean(stateDir)
		if safepath.Within(p, sd) {
			return fmt.Sprintf("must not be the state dir %s or under it", sd)
		}
		if safepath.Within(sd, p) {
			return fmt.Sprintf("must not contain the state dir %s (it would hide it)", sd)
		}
	}
	return ""
}

// CheckTarget says why p may not be a publish target ("" if it may): the
// rules a manifest's mounts[].path is held to, for targets that come
// from elsewhere (the kubelet's).
func CheckTarget(p, stateDir string) string { return checkTarget(p, stateDir) }
