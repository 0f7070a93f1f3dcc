//go:build !crashpoints

package crashpoint

// Hit is a no-op in production builds.
func Hit(op, when string) {}

// Enabled reports whether crash points are compiled in.
func Enabled() bool { return false }
