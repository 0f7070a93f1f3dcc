// Package layers holds the import rules of volumed's packages and the test
// that keeps them: the core decides and never imports a concrete driver,
// drivers act on the kernel and never import the core, and only the kinds
// (one package per source kind) and the binary join the two.
package layers
