// Command schema writes the JSON Schema of volumed's manifest format,
// generated from the Go types the agent decodes manifests into
// (agent/manifest, and each source kind's type in kinds/*), to packaging/schema/volumed-manifest.schema.json:
//
//	go run ./packaging/schema        # or: make schema
//	go run ./packaging/schema -o -   # to stdout
//
// The schema is for editors and CI linters; the agent's own parser stays
// the authority (`volumed validate`). The test beside this file fails when
// the committed schema differs from what the types generate now.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/generated"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
)

// schemaFile is where the generated schema is committed, from the module root.
const schemaFile = "packaging/schema/volumed-manifest.schema.json"

func main() {
	out := flag.String("o", "", "write the schema to this file, - for stdout (default: "+schemaFile+" in the module)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "schema:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	root, err := generated.ModuleRoot()
	if err != nil {
		return err
	}
	// Comments are read from agent/manifest relative to the module root.
	if err := os.Chdir(root); err != nil {
		return err
	}
	data, err := generate(kinds.All())
	if err != nil {
		return err
	}
	switch out {
	case "-":
		_, err = os.Stdout.Write(data)
		return err
	case "":
		out = schemaFile
	}
	return os.WriteFile(out, data, 0o644)
}

// A manifest document's spec decodes into VolumeSpec or MountSpec by its
// kind (manifest.Object keeps them out of YAML), so the schema is made of
// one wrapper per kind, chosen by kind.
type volumeManifest struct {
	APIVersion string              `yaml:"apiVersion"`
	Kind       string              `yaml:"kind"`
	Metadata   manifest.Metadata   `yaml:"metadata"`
	Spec       manifest.VolumeSpec `yaml:"spec"`
}

type mountManifest struct {
	APIVersion string             `yaml:"apiVersion"`
	Kind       string             `yaml:"kind"`
	Metadata   manifest.Metadata  `yaml:"metadata"`
	Spec       manifest.MountSpec `yaml:"spec"`
}

func (volumeManifest) JSONSchemaExtend(s *jsonschema.Schema) {
	header(s, manifest.KindVolume, "A volume: where it comes from, its filesystem, where it is published.")
}

func (mountManifest) JSONSchemaExtend(s *jsonschema.Schema) {
	header(s, manifest.KindMount, "One more place a volume declared elsewhere is published, e.g. shipped by an application package.")
}

func header(s *jsonschema.Schema, kind, desc string) {
	s.Description = desc
	for name, val := range map[string]string{"apiVersion": manifest.APIVersion, "kind": kind} {
		p, _ := s.Properties.Get(name)
		*p = jsonschema.Schema{Type: "string", Const: val}
	}
}

// unwrapDescriptions joins the lines of Go comments: an editor wraps
// a hover text itself.
func unwrapDescriptions(defs jsonschema.Definitions) {
	for _, d := range defs {
		d.Description = strings.Join(strings.Fields(d.Description), " ")
		if d.Properties == nil {
			continue
		}
		for p := d.Properties.Oldest(); p != nil; p = p.Next() {
			p.Value.Description = strings.Join(strings.Fields(p.Value.Description), " ")
		}
	}
}

// defName names a definition after its Go type; a kind's types are
// prefixed with the kind's package (kinds/loop's Source is LoopSource).
func defName(t reflect.Type) string {
	n := t.Name() // empty for []string and the like
	if n == "" {
		return ""
	}
	if pkg, ok := strings.CutPrefix(t.PkgPath(), module+"/kinds/"); ok {
		return title(pkg) + title(n)
	}
	return title(n)
}

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

const module = "github.com/volumed/volumed"

// addKinds gives the Source definition one property per kind, each the
// kind's own type with its comments.
func addKinds(r *jsonschema.Reflector, defs jsonschema.Definitions, ks []kind.Kind) error {
	src, ok := defs["Source"]
	if !ok {
		return errors.New("no Source definition (renamed in agent/manifest?)")
	}
	src.Properties = jsonschema.NewProperties()
	src.Description = "Where the volume comes from: exactly one of its members, each a kind of source."
	for _, k := range ks {
		t := reflect.TypeOf(k.New()).Elem()
		dir, ok := strings.CutPrefix(t.PkgPath(), module+"/")
		if !ok {
			return fmt.Errorf("kind %s: type %s is not in this module", k.Name(), t)
		}
		if err := r.AddGoComments(module, dir); err != nil {
			return fmt.Errorf("read comments of %s: %w", dir, err)
		}
		ks := r.ReflectFromType(t)
		for name, d := range ks.Definitions {
			if _, dup := defs[name]; dup {
				return fmt.Errorf("kind %s: definition %s is defined twice", k.Name(), name)
			}
			defs[name] = d
		}
		src.Properties.Set(k.Name(), &jsonschema.Schema{Ref: "#/$defs/" + defName(t)})
	}
	return nil
}

// documents only gathers both wrappers into one set of definitions.
type documents struct {
	Volume volumeManifest `yaml:"volume"`
	Mount  mountManifest  `yaml:"mount"`
}

func generate(ks []kind.Kind) (data []byte, err error) {
	defer func() {
		// invopop/jsonschema panics on a Go type it cannot map (a new
		// field of a kind it does not know); say which, do not crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("reflect agent/manifest types: %v", r)
		}
	}()
	r := &jsonschema.Reflector{
		FieldNameTag: "yaml", // what the decoder matches keys against
		Anonymous:    true,
		Namer:        defName,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t.Kind() != reflect.String {
				return nil
			}
			// The decoder takes a plain scalar that looks like a number
			// as written (mode: 0750, size: 1048576, serial: 123456), so
			// a string field accepts an integer too.
			return &jsonschema.Schema{Extras: map[string]any{"type": []string{"string", "integer"}}}
		},
	}
	if err := r.AddGoComments(module, "agent/manifest"); err != nil {
		return nil, fmt.Errorf("read comments of agent/manifest: %w", err)
	}
	s := r.Reflect(&documents{})
	delete(s.Definitions, "Documents")
	if err := addKinds(r, s.Definitions, ks); err != nil {
		return nil, err
	}
	rules := append(manifestRules, sourceRules(ks)...)
	for _, k := range ks {
		kr, err := kindRules(k)
		if err != nil {
			return nil, err
		}
		rules = append(rules, kr...)
	}
	if err := constrain(s.Definitions, rules); err != nil {
		return nil, err
	}
	unwrapDescriptions(s.Definitions)

	root := &jsonschema.Schema{
		Version: jsonschema.Version,
		Title:   "volumed manifest (apiVersion " + manifest.APIVersion + ")",
		Description: "One YAML document of a manifest file in /usr/lib/volumed/volumes.d, /etc/volumed/volumes.d " +
			"or /run/volumed/volumes.d. Generated from agent/manifest by `make schema`; do not edit. " +
			"`volumed validate` is the authority: it also checks what a schema cannot (clean paths, conflicts between objects).",
		Type:       "object",
		Required:   []string{"kind"},
		Properties: jsonschema.NewProperties(),
		If:         &jsonschema.Schema{Required: []string{"kind"}, Properties: jsonschema.NewProperties()},
		Then:       &jsonschema.Schema{Ref: "#/$defs/MountManifest"},
		Else:       &jsonschema.Schema{Ref: "#/$defs/VolumeManifest"},
	}
	root.Properties.Set("kind", &jsonschema.Schema{Enum: []any{manifest.KindVolume, manifest.KindMount}})
	root.If.Properties.Set("kind", &jsonschema.Schema{Const: manifest.KindMount})
	root.Definitions = s.Definitions

	data, err = json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
