package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds"
	nvmekind "github.com/volumed/volumed/kinds/nvme"
)

// need is one thing a manifest asks of the host, and where it asks it.
type need struct {
	file   string
	obj    *manifest.Object
	field  string // dotted path, "spec.filesystem.type"
	fstype string
	kind   string // source kind
	extra  string // nvme transport
}

// hostNeeds lists what the volumes in paths (files or directories, as
// validate takes them) ask of the host. Files that do not parse add
// nothing: validate reports them already.
func hostNeeds(paths []string) []need {
	var out []need
	for _, f := range manifestFiles(paths) {
		objs, _ := manifest.ParseFile(f, manifest.Options{Kinds: kinds.Manifest(kinds.All())})
		for _, o := range objs {
			v := o.Volume
			if v == nil {
				continue
			}
			if v.Filesystem != nil && v.Filesystem.Type != "" {
				out = append(out, need{file: f, obj: o, field: "spec.filesystem.type", fstype: v.Filesystem.Type})
			}
			if k := v.Source.Kind; k != "" {
				nd := need{file: f, obj: o, field: "spec.source." + k, kind: k}
				if s, ok := v.Source.Spec.(*nvmekind.Source); ok {
					nd.extra = s.Transport
				}
				out = append(out, nd)
			}
		}
	}
	return out
}

// manifestFiles are the files validate reads: the files named, and the
// manifest files in the directories named.
func manifestFiles(paths []string) []string {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		for _, e := range ents {
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				if !strings.HasPrefix(e.Name(), ".") && !e.IsDir() {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
		}
	}
	return files
}

// hostWarnings writes a warning for each thing the manifests in paths
// need that host lacks, as file:line:col: field: reason, and returns how
// many it wrote.
func hostWarnings(h hostcheck.Host, paths []string, stderr io.Writer) int {
	n := 0
	for _, nd := range hostNeeds(paths) {
		var lacks []hostcheck.Lack
		if nd.fstype != "" {
			lacks = h.Filesystem(nd.fstype)
		} else {
			lacks = h.Source(nd.kind, nd.extra)
		}
		line, col := fieldPosition(nd.file, nd.obj, nd.field)
		for _, l := range lacks {
			p := manifest.Problem{File: nd.file, Line: line, Column: col, Field: nd.field,
				Reason: "volume " + nd.obj.Metadata.Name + ": " + l.String()}
			io.WriteString(stderr, "warning: "+p.Error()+"\n")
			n++
		}
	}
	return n
}

// fieldPosition finds where field of obj is written in file, or the
// object's own line when it cannot.
func fieldPosition(file string, obj *manifest.Object, field string) (line, col int) {
	line, col = obj.Line, 1
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			return
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		kind, name := lookup(root, "kind"), lookup(root, "metadata", "name")
		if kind == nil || name == nil || kind.Value != obj.Kind || name.Value != obj.Metadata.Name {
			continue
		}
		if n := lookup(root, strings.Split(field, ".")...); n != nil {
			return n.Line, n.Column
		}
		return
	}
}

// lookup walks mapping keys from n; for a key it returns the key's node
// when the key ends the path (so a field points at its name).
func lookup(n *yaml.Node, path ...string) *yaml.Node {
	for i, k := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == k {
				if i == len(path)-1 && n.Content[j+1].Kind != yaml.ScalarNode {
					return n.Content[j]
				}
				next = n.Content[j+1]
				break
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}
