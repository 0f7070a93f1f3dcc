package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds/kind"
)

// Patterns for what agent/manifest/validate.go checks by hand. The test
// beside this file holds each against the parser on the same inputs.
const (
	namePattern   = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	modePattern   = `^[0-7]{3,4}$`
	absPattern    = `^/`
	devPattern    = `^/dev/`
	portalPattern = `^([^:\[\]]+|\[[0-9A-Fa-f:.]+\]):0*[1-9][0-9]{0,4}$`
	iqnPattern    = `^(iqn|eui|naa)\.`
	nqnPattern    = `^nqn\.`
	maxNameLength = 63
	maxPortNumber = 65535
)

// rule is one constraint the Go types cannot carry: prop names a property
// of the definition def, or is empty for the definition itself.
type rule struct {
	def, prop string
	apply     func(*jsonschema.Schema)
}

var manifestRules = []rule{
	{"Metadata", "name", name},
	{"MountSpec", "volume", name},
	{"VolumeSpec", "state", enum("present", "absent")},
	{"Source", "", exactlyOneProperty},
	{"Filesystem", "type", enum(filesystem.Names()...)},
	{"Filesystem", "format", enum(manifest.FormatIfBlank, manifest.FormatNever)},
	{"Target", "path", stringPattern(absPattern)},
	{"MountSpec", "path", stringPattern(absPattern)},
	{"LUKS2", "keys", minItems(1)},
	{"LUKS2Key", "", oneRequired("file", "tpm2", "tang", "threshold")},
	{"ThresholdKey", "n", minimum(1)},
	{"ThresholdKey", "keys", minItems(1)},
	{"TangKey", "url", stringPattern(`^https?://[^/]+`)},
	{"TangKey", "thumbprint", stringPattern(`^[A-Za-z0-9_-]{27}$|^[A-Za-z0-9_-]{43}$`)},
	{"LUKS2Key", "file", stringPattern(absPattern)},
	{"LUKS2", "sectorSize", intEnum(512, 1024, 2048, 4096)},
	{"LUKS2", "pbkdf", enum(manifest.PBKDFArgon2id, manifest.PBKDFPBKDF2)},
	{"TPM2Key", "pcrs", pcrList},
}

// sourceRules depend on the set of kinds: a block source needs a
// filesystem block, a staged one (directory, tmpfs) has none.
func sourceRules(ks []kind.Kind) []rule {
	var staged, block []string
	for _, k := range ks {
		if k.Traits().Staged {
			staged = append(staged, k.Name())
		} else {
			block = append(block, k.Name())
		}
	}
	return []rule{
		{"VolumeSpec", "", requiredIf(staged, "filesystem", false)},
		{"VolumeSpec", "", requiredIf(block, "filesystem", true)},
		{"VolumeSpec", "", requiredIf(staged, "encryption", false)},
	}
}

// formats are the string shapes a kind's rules may name.
var formats = map[kind.Format]func(*jsonschema.Schema){
	kind.Abs:    stringPattern(absPattern),
	kind.Dev:    stringPattern(devPattern),
	kind.Size:   sizeRule,
	kind.Mode:   mode,
	kind.Portal: stringPattern(portalPattern),
	kind.IQN:    stringPattern(iqnPattern),
	kind.NQN:    stringPattern(nqnPattern),
	kind.Port:   portRange,
}

// kindRules turns a kind's rules into the generator's; a check it does
// not know stops the generator.
func kindRules(k kind.Kind) ([]rule, error) {
	var out []rule
	prefix := defName(reflect.TypeOf(k.New()).Elem())
	prefix = strings.TrimSuffix(prefix, "Source") // e.g. Loop
	for _, r := range k.Rules() {
		var apply func(*jsonschema.Schema)
		switch c := r.Check.(type) {
		case kind.Min:
			apply = minimum(int(c))
		case kind.Enum:
			apply = enum(c...)
		case kind.Optional:
			apply = optional(string(c))
		case kind.OneOf:
			apply = oneRequired(c...)
		case kind.Format:
			apply = formats[c]
		}
		if apply == nil {
			return nil, fmt.Errorf("kind %s: rule for %s.%s: unknown check %#v", k.Name(), r.Type, r.Prop, r.Check)
		}
		out = append(out, rule{prefix + r.Type, r.Prop, apply})
	}
	return out, nil
}

// constrain applies the rules. A rule whose definition or property is gone
// is an error: a field renamed in agent/manifest must not silently lose
// its rule.
func constrain(defs jsonschema.Definitions, rules []rule) error {
	for _, r := range rules {
		d, ok := defs[r.def]
		if !ok {
			return fmt.Errorf("rule for %s: no such definition (renamed in agent/manifest?)", r.def)
		}
		target := d
		if r.prop != "" {
			p, ok := d.Properties.Get(r.prop)
			if !ok {
				return fmt.Errorf("rule for %s.%s: no such property (renamed in agent/manifest?)", r.def, r.prop)
			}
			target = p
		}
		r.apply(target)
	}
	return nil
}

func stringOnly(s *jsonschema.Schema) {
	s.Extras = nil
	s.Type = "string"
}

func enum(values ...string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		stringOnly(s)
		for _, v := range values {
			s.Enum = append(s.Enum, v)
		}
	}
}

// stringPattern is for values no plain integer can be (paths, IQNs).
func stringPattern(re string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		stringOnly(s)
		s.Pattern = re
	}
}

// name keeps the integer alternative: `name: 123` is a valid name.
func name(s *jsonschema.Schema) {
	s.Pattern = namePattern
	n := uint64(maxNameLength)
	s.MaxLength = &n
}

func sizeRule(s *jsonschema.Schema) {
	s.Pattern = size.Pattern()
	s.Minimum = json.Number("1")
}

func mode(s *jsonschema.Schema) {
	s.Pattern = modePattern
	s.Minimum = json.Number("0")
}

func minimum(n int) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) { s.Minimum = json.Number(fmt.Sprint(n)) }
}

func portRange(s *jsonschema.Schema) {
	s.Minimum = "1"
	s.Maximum = json.Number(fmt.Sprint(maxPortNumber))
}

func minItems(n uint64) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) { s.MinItems = &n }
}

func intEnum(values ...int) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		for _, v := range values {
			s.Enum = append(s.Enum, v)
		}
	}
}

// pcrList: PCR indexes of a TPM2, at least one, none twice.
func pcrList(s *jsonschema.Schema) {
	n := uint64(1)
	s.MinItems = &n
	s.UniqueItems = true
	if s.Items != nil {
		s.Items.Minimum = "0"
		s.Items.Maximum = json.Number(fmt.Sprint(manifest.MaxPCR))
	}
}

func optional(prop string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		s.Required = slices.DeleteFunc(s.Required, func(r string) bool { return r == prop })
	}
}

func oneRequired(props ...string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		for _, p := range props {
			s.OneOf = append(s.OneOf, &jsonschema.Schema{Required: []string{p}})
		}
	}
}

// exactlyOneProperty: every member of Source is a kind of source, so a new
// one added to the type is covered without a new rule.
func exactlyOneProperty(s *jsonschema.Schema) {
	var props []string
	for p := s.Properties.Oldest(); p != nil; p = p.Next() {
		props = append(props, p.Key)
	}
	oneRequired(props...)(s)
}

// requiredIf: a source of one of kinds has property prop of the spec
// (want) or has none.
func requiredIf(kinds []string, prop string, want bool) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		if len(kinds) == 0 {
			return
		}
		var any []*jsonschema.Schema
		for _, k := range kinds {
			any = append(any, &jsonschema.Schema{Required: []string{k}})
		}
		src := jsonschema.NewProperties()
		src.Set("source", &jsonschema.Schema{AnyOf: any})
		then := &jsonschema.Schema{Required: []string{prop}}
		if !want {
			then = &jsonschema.Schema{Not: then}
		} else {
			// Or a raw block volume: no filesystem, published only
			// as the device node (every mount block: true).
			block := jsonschema.NewProperties()
			block.Set("block", &jsonschema.Schema{Const: true})
			mounts := jsonschema.NewProperties()
			one := uint64(1)
			mounts.Set("mounts", &jsonschema.Schema{MinItems: &one, Items: &jsonschema.Schema{Required: []string{"block"}, Properties: block}})
			then = &jsonschema.Schema{AnyOf: []*jsonschema.Schema{then, {Required: []string{"mounts"}, Properties: mounts}}}
		}
		s.AllOf = append(s.AllOf, &jsonschema.Schema{
			If:   &jsonschema.Schema{Required: []string{"source"}, Properties: src},
			Then: then,
		})
	}
}
