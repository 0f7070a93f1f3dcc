package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
