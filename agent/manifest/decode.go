package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// position is a 1-based line and column in a manifest file.
type position struct{ line, col int }

// document is the top level of one YAML document. Spec is kept as a node
// because its type depends on Kind.
type document struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   Metadata   `yaml:"metadata"`
	Spec       *yaml.Node `yaml:"spec"`
}

var (
	nodeType   = reflect.TypeOf((*yaml.Node)(nil))
	sourceType = reflect.TypeOf(Source{})
)

// ParseBytes decodes and validates the manifest documents in data as if
// they were read from the file name. It does what ParseFile does except
// the file system checks. If anything is wrong it returns no objects and
// every problem found.
func ParseBytes(name string, data []byte, opts Options) ([]*Object, []Problem) {
	if len(data) > MaxFileSize {
		return nil, []Problem{{File: name, Reason: fmt.Sprintf("too big: %d bytes, the limit is 1 MiB", len(data))}}
	}
	if !utf8.Valid(data) {
		line, col := invalidUTF8At(data)
		return nil, []Problem{{File: name, Line: line, Column: col, Reason: "not valid UTF-8"}}
	}

	var objs []*Object
	var probs []Problem
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for ndoc := 0; ; ndoc++ {
		var root yaml.Node
		err := decodeNode(dec, &root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			probs = append(probs, syntaxProblem(name, err))
			break
		}
		if ndoc == MaxDocuments {
			line := root.Line
			if len(root.Content) > 0 {
				line = root.Content[0].Line
			}
			probs = append(probs, Problem{File: name, Line: line, Column: 1,
				Reason: fmt.Sprintf("too many documents: the limit is %d", MaxDocuments)})
			break
		}
		if len(root.Content) == 0 {
			continue
		}
		n := root.Content[0]
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			continue // an empty document, e.g. after a trailing ---
		}
		obj, ps := decodeObject(name, n, opts)
		probs = append(probs, ps...)
		if obj != nil {
			objs = append(objs, obj)
		}
	}
	probs = append(probs, duplicateNames(objs)...)
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool {
			a, b := probs[i], probs[j]
			return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
		})
		// A generated file gone wrong can hold a hundred thousand
		// mistakes; the first ones are what the operator needs.
		if n := len(probs) - MaxProblems; n > 0 {
			probs = append(probs[:MaxProblems:MaxProblems], Problem{File: name, Reason: fmt.Sprintf("%d more problems not shown", n)})
		}
		return nil, probs
	}
	return objs, nil
}

// decodeNode keeps a panic inside the YAML parser from taking the agent
// down: a hostile file must only ever be refused.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxProblem turns a parser error into a Problem. yaml.v3 reports only
// a line, so the column is 1. It prints scanner errors with 1-based lines
// but parser errors (the "did not find expected ..." family) with the
// 0-based line where the enclosing construct began, and no line at all
// when that number is 0.
func syntaxProblem(file string, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if isParserError(msg) {
			line++
		}
	}
	return Problem{File: file, Line: line, Column: 1, Reason: "invalid YAML: " + msg}
}

func isParserError(msg string) bool {
	switch msg {
	case "found duplicate %TAG directive", "found duplicate %YAML directive",
		"found incompatible YAML document", "found undefined tag handle":
		return true
	}
	return strings.HasPrefix(msg, "did not find expected")
}

func invalidUTF8At(data []byte) (line, col int) {
	line, col = 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return line, col
}

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

func unknownField(key string, fields map[string]int) string {
	best, bestD := "", 3
	for name := range fields {
		if strings.EqualFold(name, key) {
			best, bestD = name, 0
			break
		}
		dist := editDistance(key, name)
		limit := 1
		if len(name) > 4 {
			limit = 2
		}
		if dist <= limit && (dist < bestD || dist == bestD && name < best) {
			best, bestD = name, dist
		}
	}
	if best == "" {
		return "unknown field"
	}
	return fmt.Sprintf("unknown field (did you mean %q?)", best)
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
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

// duplicateNames refuses two objects of one kind and name in one file:
// the later one cannot be told apart from the earlier by the Builder.
func duplicateNames(objs []*Object) []Problem {
	var probs []Problem
	first := map[string]*Object{}
	for _, o := range objs {
		if o.Metadata.Name == "" {
			continue
		}
		k := o.Kind + "/" + o.Metadata.Name
		if f, ok := first[k]; ok {
			probs = append(probs, o.problem("metadata.name",
				fmt.Sprintf("%s %q is already declared in this file at line %d", o.Kind, o.Metadata.Name, f.Line)))
			continue
		}
		first[k] = o
	}
	return probs
}

// problem builds a Problem at field, or at its nearest ancestor that was
// written in the file, or at the document.
func (o *Object) problem(field, reason string) Problem {
	p := Problem{File: o.File, Line: o.Line, Column: 1, Field: field, Reason: reason}
	for f := field; ; {
		if pos, ok := o.pos[f]; ok {
			p.Line, p.Column = pos.line, pos.col
			break
		}
		if f == "" {
			break
		}
		f = parentPath(f)
	}
	return p
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}
