package manifest

// The tests are an external package (they need kinds.All, which imports
// this package); these are the internals they check.
var (
	CheckName   = checkName
	CheckTarget = checkTarget
)
