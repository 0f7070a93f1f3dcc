//go:build !crashpoints

package crashpoint

// Hit is a no-op in production builds.
func Hit(op, when string) {}

// HitFor is a no-op in production builds.
func HitFor(op, when, volume string) {}
