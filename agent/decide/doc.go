// Package decide holds volumed's decisions: what to do next with each
// volume (Plan, Decide), whether a device may be formatted or encrypted,
// whose data a device holds, whether a kernel object is volumed's to
// tear down, what a manifest edit cannot change live. Each is a pure
// function of desired state, recorded state (store/record) and facts
// read before it is called; none can reach the agent, the kernel or the
// store: the package imports the standard library's pure packages,
// agent/manifest and store/record alone, and internal/layers fails the
// build's tests when it imports anything else.
package decide
