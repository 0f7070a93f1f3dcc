// Package layers holds the import rules of volumed's packages and the test
// that keeps them: the core decides and never imports a concrete driver,
// drivers act on the kernel and never import the core, and only the kinds
// (one package per source kind) and the binary join the two. The pure
// packages (PureRules: the decisions and the records they read) import
// nothing that reaches the kernel, the store or the agent.
package layers
