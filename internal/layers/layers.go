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
