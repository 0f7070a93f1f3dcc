package layers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the import path every rule is relative to.
const Module = "github.com/volumed/volumed"

// A Layer is a set of packages (by path prefix below Module) and the
// layers they may import. Packages of the module that match no layer
// (the binary, tests, packaging) may import anything.
type Layer struct {
	Name     string
	Prefixes []string
	MayUse   []string // layer names, its own included when allowed
}

// Rules returns volumed's layers, from the bottom up.
func Rules() []Layer {
	return []Layer{
		{Name: "internal", Prefixes: []string{"internal/"}, MayUse: []string{"internal"}},
		{Name: "drivers", Prefixes: []string{"drivers/", "firmware"}, MayUse: []string{"internal", "drivers"}},
		{Name: "core", Prefixes: []string{"agent", "store"}, MayUse: []string{"internal", "core"}},
		{Name: "kinds", Prefixes: []string{"kinds"}, MayUse: []string{"internal", "drivers", "core", "kinds"}},
	}
}

func layerOf(rules []Layer, pkg string) *Layer {
	rel, ok := strings.CutPrefix(pkg, Module+"/")
	if !ok {
		return nil
	}
	for i := range rules {
		for _, p := range rules[i].Prefixes {
			if rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/") {
				return &rules[i]
			}
		}
	}
	return nil
}

// Violations lists every import (package → its non-test imports) that
// breaks a rule, as "pkg (layer) imports dep (layer)".
func Violations(rules []Layer, imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		from := layerOf(rules, pkg)
		if from == nil {
			continue
		}
		for _, dep := range deps {
			if !strings.HasPrefix(dep, Module+"/") {
				continue
			}
			to := layerOf(rules, dep)
			name := "unlayered"
			if to != nil {
				name = to.Name
				if slices.Contains(from.MayUse, to.Name) {
					continue
				}
			}
			out = append(out, fmt.Sprintf("%s (%s) imports %s (%s)",
				strings.TrimPrefix(pkg, Module+"/"), from.Name, strings.TrimPrefix(dep, Module+"/"), name))
		}
	}
	sort.Strings(out)
	return out
}

// A Pure package cannot reach the kernel, the store or the agent by
// construction: of the module it imports only MayUse, and of the rest
// only the standard library, less Forbidden.
type Pure struct {
	Package string
	MayUse  []string // module packages (below Module)
}

// Forbidden are the standard packages (and their subpackages) that reach
// the kernel, a process or the network, or step around the type system.
var Forbidden = []string{"os", "syscall", "net", "io/fs", "unsafe", "plugin", "runtime/cgo", "runtime/debug", "log", "log/slog"}

// PureRules names volumed's pure packages: the decisions, and the records
// they read.
func PureRules() []Pure {
	return []Pure{
		{Package: "agent/decide", MayUse: []string{"agent/manifest", "store/record"}},
		{Package: "store/record"},
	}
}

// PureViolations lists every import (package → its non-test imports) by
// which a pure package could reach beyond its data, as "pkg imports dep".
func PureViolations(rules []Pure, imports map[string][]string) []string {
	var out []string
	for _, r := range rules {
		for _, dep := range imports[Module+"/"+r.Package] {
			if pureImport(r, dep) {
				continue
			}
			out = append(out, fmt.Sprintf("%s (pure) imports %s", r.Package, dep))
		}
	}
	sort.Strings(out)
	return out
}

func pureImport(r Pure, dep string) bool {
	if rel, ok := strings.CutPrefix(dep, Module+"/"); ok {
		return slices.Contains(r.MayUse, rel)
	}
	if first, _, _ := strings.Cut(dep, "/"); strings.Contains(first, ".") {
		return false // outside the standard library: golang.org/x/sys, bbolt, ...
	}
	for _, f := range Forbidden {
		if dep == f || strings.HasPrefix(dep, f+"/") {
			return false
		}
	}
	return true
}
