// Package crashpoint lets the crash tests kill the agent with SIGKILL at a
// named instant (e.g. right after the intent of an attach is durable). It
// is inert unless the binary is built with the `crashpoints` tag.
package crashpoint

// EnvVar names the point to die at, e.g. "attach:after-intent" or
// "publish:after-kernel". A trailing "#N" dies at the N-th hit (1-based).
const EnvVar = "VOLUMED_CRASH_AT"
