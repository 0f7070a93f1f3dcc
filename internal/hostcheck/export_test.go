package hostcheck

// The sources test is an external package (it takes each kind's Needs,
// and the kinds import this package); these are the helpers it shares.
var (
	FakeHost = fakeHost
	Whats    = whats
)
