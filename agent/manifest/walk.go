// The strict walk of a YAML node tree into the manifest's Go types.

package manifest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	nodeType   = reflect.TypeOf((*yaml.Node)(nil))
	sourceType = reflect.TypeOf(Source{})
)

// decoder walks a YAML node tree against Go struct types by their yaml
// tags, so that every problem names the full field path and its position.
type decoder struct {
	file  string
	kinds Kinds
	probs []Problem
	pos   map[string]position
	bad   map[string]bool // paths that failed to decode; validation skips them
}

func (d *decoder) problem(n *yaml.Node, path, reason string) {
	d.probs = append(d.probs, Problem{File: d.file, Line: n.Line, Column: n.Column, Field: path, Reason: reason})
	d.bad[path] = true
}

func decodeObject(file string, n *yaml.Node, opts Options) (*Object, []Problem) {
	d := &decoder{file: file, kinds: opts.Kinds, pos: map[string]position{}, bad: map[string]bool{}}
	d.pos[""] = position{n.Line, n.Column}
	if !d.checkTree(n, "", 1) {
		return nil, d.probs
	}
	if n.Kind != yaml.MappingNode {
		d.problem(n, "", "a document must be a mapping, got "+describe(n))
		return nil, d.probs
	}
	var doc document
	d.value(n, reflect.ValueOf(&doc).Elem(), "")
	obj := &Object{
		APIVersion: doc.APIVersion,
		Kind:       doc.Kind,
		Metadata:   doc.Metadata,
		File:       file,
		Line:       n.Line,
		pos:        d.pos,
	}
	kindOK := true
	switch doc.Kind {
	case KindVolume:
		obj.Volume = &VolumeSpec{}
		if doc.Spec != nil {
			d.value(doc.Spec, reflect.ValueOf(obj.Volume).Elem(), "spec")
		}
	case KindMount:
		obj.Mount = &MountSpec{}
		if doc.Spec != nil {
			d.value(doc.Spec, reflect.ValueOf(obj.Mount).Elem(), "spec")
		}
	default:
		kindOK = false
	}
	v := &validator{obj: obj, opts: opts, bad: d.bad}
	v.object(kindOK, doc.Spec != nil)
	return obj, append(d.probs, v.probs...)
}

// checkTree refuses what the struct walk must never see: anchors and
// aliases (they make small files expand into huge ones and hide where a
// value came from) and deep nesting.
func (d *decoder) checkTree(n *yaml.Node, path string, depth int) bool {
	if depth > MaxDepth {
		d.problem(n, path, fmt.Sprintf("nested too deeply (more than %d levels)", MaxDepth))
		return false
	}
	if n.Kind == yaml.AliasNode {
		d.problem(n, path, fmt.Sprintf("aliases are not allowed (*%s)", n.Value))
		return false
	}
	ok := true
	if n.Anchor != "" {
		d.problem(n, path, fmt.Sprintf("anchors are not allowed (&%s)", n.Anchor))
		ok = false
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := joinPath(path, k.Value)
			if !d.checkTree(k, p, depth+1) {
				ok = false
			}
			if !d.checkTree(n.Content[i+1], p, depth+1) {
				ok = false
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if !d.checkTree(c, fmt.Sprintf("%s[%d]", path, i), depth+1) {
				ok = false
			}
		}
	}
	return ok
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// value decodes n into v. A null leaves v at its zero value: null and
// absent mean the same, as in JSON.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Tag != "" && !strings.HasPrefix(n.Tag, "!!") {
		d.problem(n, path, fmt.Sprintf("custom tag %s is not supported", n.Tag))
		return
	}
	t := v.Type()
	switch {
	case t == nodeType:
		v.Set(reflect.ValueOf(n))
	case t == sourceType:
		d.source(n, v.Addr().Interface().(*Source), path)
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		nv := reflect.New(t.Elem())
		d.value(n, nv.Elem(), path)
		v.Set(nv)
	case t.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.problem(n, path, "expected a list, got "+describe(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.pos[p] = position{item.Line, item.Column}
			d.value(item, s.Index(i), p)
		}
		v.Set(s)
	case t.Kind() == reflect.String:
		switch {
		case n.Kind != yaml.ScalarNode:
			d.problem(n, path, "expected a string, got "+describe(n))
		case n.Tag == "!!binary":
			d.problem(n, path, "expected a string, got binary data")
		default:
			// Plain scalars that look like numbers ("0750", 1048576) are
			// taken as written: modes and sizes are strings in the types.
			v.SetString(n.Value)
		}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
			d.problem(n, path, "expected an integer, got "+describe(n))
			return
		}
		if v.OverflowInt(i) {
			d.problem(n, path, "integer out of range: "+n.Value)
			return
		}
		v.SetInt(i)
	case t.Kind() == reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			d.problem(n, path, "expected true or false, got "+describe(n))
			return
		}
		v.SetBool(b)
	default:
		// Only reachable if types.go gains a field of a new Go type.
		d.problem(n, path, fmt.Sprintf("cannot decode into %s", t))
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	fields := yamlFields(v.Type())
	d.entries(n, path, fields, func(idx int, val *yaml.Node, p string) {
		d.value(val, v.Field(idx), p)
	})
}

// source decodes spec.source: each key names a registered kind, whose
// own type its value is decoded into. More than one member is kept for
// the validator to refuse (and check each).
func (d *decoder) source(n *yaml.Node, src *Source, path string) {
	names := map[string]int{}
	for i, name := range d.kinds.Names() {
		names[name] = i
	}
	d.entries(n, path, names, func(idx int, val *yaml.Node, p string) {
		if isNull(val) {
			return // as for any other field: null is absent
		}
		kind := d.kinds[idx]
		spec := kind.New()
		d.value(val, reflect.ValueOf(spec).Elem(), p)
		src.more = append(src.more, member{kind, spec})
	})
	if len(src.more) > 0 {
		src.Kind, src.Spec = src.more[0].kind.Name(), src.more[0].spec
	}
}

// entries walks the mapping n, whose keys must be among known (name →
// index): a key that is not a string, is repeated or is unknown is a
// problem; each other one has its position noted and is handed to each.
func (d *decoder) entries(n *yaml.Node, path string, known map[string]int, each func(idx int, val *yaml.Node, path string)) {
	if n.Kind != yaml.MappingNode {
		d.problem(n, path, "expected a mapping, got "+describe(n))
		return
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.problem(k, path, "a key must be a string, got "+describe(k))
			continue
		}
		p := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.problem(k, p, fmt.Sprintf("duplicate key (first at %d:%d)", first.Line, first.Column))
			continue
		}
		seen[k.Value] = k
		idx, ok := known[k.Value]
		if !ok {
			d.problem(k, p, unknownField(k.Value, known))
			continue
		}
		if val.Kind == yaml.ScalarNode {
			d.pos[p] = position{val.Line, val.Column}
		} else {
			d.pos[p] = position{k.Line, k.Column}
		}
		each(idx, val, p)
	}
}

// yamlFields maps the yaml names of t's fields to their indexes.
func yamlFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		out[name] = i
	}
	return out
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return strconv.Quote(v)
	}
	return "nothing"
}
