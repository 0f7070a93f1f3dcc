package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	ij "github.com/invopop/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/internal/generated"
	"github.com/volumed/volumed/internal/size"
	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
	"github.com/volumed/volumed/kinds/loop"
)

// TestSchemaUpToDate fails when agent/manifest's types (or their comments)
// changed and the committed schema was not regenerated.
func TestSchemaUpToDate(t *testing.T) {
	root, err := generated.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	want, err := generate(kinds.All())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatalf("%v: run `make schema`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale (%s): run `make schema`", schemaFile, generated.FirstDifference(got, want))
	}
}

// TestSchemaListsEveryKind: the committed schema offers each kind of
// kinds.All under source, with a definition of its fields.
func TestSchemaListsEveryKind(t *testing.T) {
	data, err := os.ReadFile(filepath.Base(schemaFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Ref string `json:"$ref"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	src := doc.Defs["Source"].Properties
	for _, k := range kinds.All() {
		p, ok := src[k.Name()]
		def, found := strings.CutPrefix(p.Ref, "#/$defs/")
		if !ok || !found || len(doc.Defs[def].Properties) == 0 {
			t.Errorf("source kind %s: schema property %+v, definition %q has no fields", k.Name(), p, def)
		}
	}
	if len(src) != len(kinds.All()) {
		t.Errorf("schema lists %d source kinds, kinds.All %d", len(src), len(kinds.All()))
	}
}

// TestConstrainRefusesAStaleRule: a rule for a field renamed away must stop
// the generator, not vanish from the schema.
func TestConstrainRefusesAStaleRule(t *testing.T) {
	props := ij.NewProperties()
	props.Set("name", &ij.Schema{Type: "string"})
	defs := ij.Definitions{"Metadata": {Type: "object", Properties: props}}
	if err := constrain(defs, []rule{{"Metadata", "name", name}}); err != nil {
		t.Fatalf("constrain on an existing property: %v", err)
	}
	if p, _ := props.Get("name"); p.Pattern != namePattern {
		t.Errorf("rule not applied: pattern %q", p.Pattern)
	}
	for _, r := range []rule{{"Metadata", "title", name}, {"Meta", "", optional("name")}} {
		err := constrain(defs, []rule{r})
		if err == nil || !strings.Contains(err.Error(), r.def) {
			t.Errorf("constrain with a rule for %s.%s = %v, want an error naming it", r.def, r.prop, err)
		}
	}
}

// unknownCheck is the loop kind with a rule the generator does not know.
type unknownCheck struct{ loop.Kind }

func (unknownCheck) Rules() []kind.Rule {
	return []kind.Rule{{Type: "Source", Prop: "file", Check: kind.Format("absolute")}}
}

func TestKindRulesRefuseAnUnknownCheck(t *testing.T) {
	if rs, err := kindRules(loop.Kind{}); err != nil || len(rs) != len(loop.Kind{}.Rules()) {
		t.Fatalf("kindRules(loop) = %d rules, %v", len(rs), err)
	}
	if _, err := kindRules(unknownCheck{}); err == nil || !strings.Contains(err.Error(), "absolute") || !strings.Contains(err.Error(), "Source.file") {
		t.Errorf("kindRules with an unknown check = %v, want an error naming it and its property", err)
	}
}

func compileSchema(t *testing.T) *validator.Schema {
	t.Helper()
	path, err := filepath.Abs(filepath.Base(schemaFile))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := validator.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	c := validator.NewCompiler()
	if err := c.AddResource(path, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(path)
	if err != nil {
		t.Fatalf("compile %s: %v", path, err)
	}
	return s
}

// yamlDocuments turns each document of a manifest file into the JSON value
// an editor's YAML language server would check against the schema.
func yamlDocuments(data []byte) ([]any, error) {
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		inst, err := validator.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			return nil, err
		}
		docs = append(docs, inst)
	}
}

func TestExamplesMatchSchema(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in ../examples (%v)", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := yamlDocuments(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i, d := range docs {
			if err := s.Validate(d); err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
			}
		}
	}
}

const volumeHead = "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: data}\n"

// TestSchemaAgreesWithParser runs documents through the agent's parser and
// the schema: an editor must not flag what the agent accepts, and should
// flag what it refuses wherever a schema can tell.
func TestSchemaAgreesWithParser(t *testing.T) {
	s := compileSchema(t)
	cases := []struct {
		name, doc string
		ok        bool
	}{
		{"loop volume", volumeHead + "spec:\n  source: {loop: {file: /var/lib/images/data.img, create: {size: 10Gi}}}\n  filesystem: {type: ext4, mountOptions: [noatime]}\n  mounts: [{path: /srv/data}, {path: /srv/ro, readOnly: true}]\n", true},
		{"size as a bare number", volumeHead + "spec: {source: {loop: {file: /i.img, create: {size: 1048576}}}, filesystem: {type: ext4}}\n", true},
		{"size with a decimal unit", volumeHead + "spec: {source: {tmpfs: {size: 64M}}}\n", true},
		{"size with an unknown unit", volumeHead + "spec: {source: {tmpfs: {size: 64MB}}}\n", false},
		{"size zero", volumeHead + "spec: {source: {tmpfs: {size: 0Gi}}}\n", false},
		{"size missing", volumeHead + "spec: {source: {tmpfs: {}}}\n", false},
		{"directory mode unquoted", volumeHead + "spec: {source: {directory: {path: /srv/shared, create: {mode: 0750, uid: 0, gid: 100}}}}\n", true},
		{"directory mode not octal", volumeHead + "spec: {source: {directory: {path: /srv/shared, create: {mode: \"0790\"}}}}\n", false},
		{"negative uid", volumeHead + "spec: {source: {directory: {path: /srv/shared, create: {uid: -1}}}}\n", false},
		{"filesystem on a directory", volumeHead + "spec: {source: {directory: {path: /srv/x}}, filesystem: {type: ext4}}\n", false},
		{"filesystem on tmpfs", volumeHead + "spec: {source: {tmpfs: {size: 1Mi}}, filesystem: {type: xfs}}\n", false},
		{"loop without filesystem", volumeHead + "spec: {source: {loop: {file: /i.img}}}\n", false},
		{"device without filesystem", volumeHead + "spec: {source: {device: {serial: X1}}}\n", false},
		{"encrypted loop", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{file: /k}, {tpm2: {pcrs: [7, 0]}}], sectorSize: 4096}}}\n", true},
		{"encryption without keys", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: []}}}\n", false},
		{"encryption key relative", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{file: k}]}}}\n", false},
		{"encryption key file and tpm2", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{file: /k, tpm2: {pcrs: [7]}}]}}}\n", false},
		{"encryption pcr 24", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{tpm2: {pcrs: [24]}}]}}}\n", false},
		{"encryption pcr twice", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{tpm2: {pcrs: [7, 7]}}]}}}\n", false},
		{"encryption sector size 1000", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4}, encryption: {luks2: {keys: [{file: /k}], sectorSize: 1000}}}\n", false},
		{"encryption on tmpfs", volumeHead + "spec: {source: {tmpfs: {size: 1Mi}}, encryption: {luks2: {keys: [{file: /k}]}}}\n", false},
		{"no source", volumeHead + "spec: {source: {}}\n", false},
		{"two sources", volumeHead + "spec: {source: {tmpfs: {size: 1Mi}, directory: {path: /srv/x}}}\n", false},
		{"no spec", volumeHead, false},
		{"unknown field", volumeHead + "spec: {source: {tmpfs: {size: 1Mi}}, mount: [{path: /srv/x}]}\n", false},
		{"misspelt nested field", volumeHead + "spec: {source: {loop: {file: /i.img, readonly: true}}}\n", false},
		{"relative loop file", volumeHead + "spec: {source: {loop: {file: images/i.img}}}\n", false},
		{"relative target", volumeHead + "spec: {source: {tmpfs: {size: 1Mi}}, mounts: [{path: srv/x}]}\n", false},
		{"state absent", volumeHead + "spec: {state: absent, source: {tmpfs: {size: 1Mi}}}\n", true},
		{"state unknown", volumeHead + "spec: {state: gone, source: {tmpfs: {size: 1Mi}}}\n", false},
		{"filesystem type zfs", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: zfs}}\n", false},
		{"filesystem without type", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {format: never}}\n", false},
		{"format always", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4, format: always}}\n", false},
		{"mount options not a list", volumeHead + "spec: {source: {loop: {file: /i.img}}, filesystem: {type: ext4, mountOptions: noatime}}\n", false},
		{"read-only not a boolean", volumeHead + "spec: {source: {loop: {file: /i.img, readOnly: 1}}}\n", false},
		{"device by serial", volumeHead + "spec: {source: {device: {serial: S3Z1NB0K123456}}, filesystem: {type: xfs}}\n", true},
		{"device by numeric serial", volumeHead + "spec: {source: {device: {serial: 123456}}, filesystem: {type: ext4}}\n", true},
		{"device by path and serial", volumeHead + "spec: {source: {device: {path: /dev/sdb, serial: X1}}}\n", false},
		{"device path outside /dev", volumeHead + "spec: {source: {device: {path: /srv/disk}}}\n", false},
		{"device with nothing", volumeHead + "spec: {source: {device: {}}}\n", false},
		{"iscsi without lun", volumeHead + "spec: {source: {iscsi: {portal: \"192.0.2.10:3260\", iqn: \"iqn.2026-01.com.example:data\"}}, filesystem: {type: ext4}}\n", true},
		{"iscsi ipv6 portal", volumeHead + "spec: {source: {iscsi: {portal: \"[2001:db8::10]:3260\", iqn: \"iqn.2026-01.com.example:data\", lun: 1}}, filesystem: {type: ext4}}\n", true},
		{"iscsi portal without port", volumeHead + "spec: {source: {iscsi: {portal: 192.0.2.10, iqn: \"iqn.2026-01.com.example:data\"}}}\n", false},
		{"iscsi portal port zero", volumeHead + "spec: {source: {iscsi: {portal: \"192.0.2.10:0\", iqn: \"iqn.2026-01.com.example:data\"}}}\n", false},
		{"iscsi bad iqn", volumeHead + "spec: {source: {iscsi: {portal: \"192.0.2.10:3260\", iqn: data}}}\n", false},
		{"iscsi negative lun", volumeHead + "spec: {source: {iscsi: {portal: \"192.0.2.10:3260\", iqn: \"iqn.2026-01.com.example:data\", lun: -1}}}\n", false},
		{"iscsi chap without password file", volumeHead + "spec: {source: {iscsi: {portal: \"192.0.2.10:3260\", iqn: \"iqn.2026-01.com.example:data\", chap: {username: u}}}}\n", false},
		{"nvme", volumeHead + "spec: {source: {nvme: {transport: tcp, address: 192.0.2.11, nqn: \"nqn.2026-01.com.example:data\", namespace: 1}}, filesystem: {type: ext4}}\n", true},
		{"nvme fc", volumeHead + "spec: {source: {nvme: {transport: fc, address: 192.0.2.11, nqn: \"nqn.2026-01.com.example:data\", namespace: 1}}}\n", false},
		{"nvme namespace zero", volumeHead + "spec: {source: {nvme: {transport: tcp, address: 192.0.2.11, nqn: \"nqn.2026-01.com.example:data\", namespace: 0}}}\n", false},
		{"nvme port too big", volumeHead + "spec: {source: {nvme: {transport: tcp, address: 192.0.2.11, port: 70000, nqn: \"nqn.2026-01.com.example:data\", namespace: 1}}}\n", false},
		{"nvme bad nqn", volumeHead + "spec: {source: {nvme: {transport: tcp, address: 192.0.2.11, nqn: data, namespace: 1}}}\n", false},
		{"nvme without address", volumeHead + "spec: {source: {nvme: {transport: tcp, nqn: \"nqn.2026-01.com.example:data\", namespace: 1}}}\n", false},
		{"uppercase name", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: Data}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"name of 64 characters", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + strings.Repeat("a", 64) + "}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"name of 63 characters", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: " + strings.Repeat("a", 63) + "}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", true},
		{"name ending in a dash", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: data-}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"no name", "apiVersion: volumed/v1\nkind: Volume\nmetadata: {}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"wrong apiVersion", "apiVersion: volumed/v2\nkind: Volume\nmetadata: {name: data}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"no apiVersion", "kind: Volume\nmetadata: {name: data}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"unknown kind", "apiVersion: volumed/v1\nkind: Disk\nmetadata: {name: data}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"no kind", "apiVersion: volumed/v1\nmetadata: {name: data}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"mount", "apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: app-logs}\nspec: {volume: data, path: /srv/app/logs, readOnly: true}\n", true},
		{"mount with a volume spec", "apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: app-logs}\nspec: {source: {tmpfs: {size: 1Mi}}}\n", false},
		{"mount without volume", "apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: app-logs}\nspec: {path: /srv/app/logs}\n", false},
		{"mount of a bad volume name", "apiVersion: volumed/v1\nkind: Mount\nmetadata: {name: app-logs}\nspec: {volume: Data_1, path: /srv/app/logs}\n", false},
		{"volume with a mount spec", volumeHead + "spec: {volume: data, path: /srv/x}\n", false},
	}
	opts := manifest.Options{StateDir: "/var/lib/volumed", Kinds: kinds.Manifest(kinds.All())}
	for _, c := range cases {
		_, probs := manifest.ParseBytes(c.name+".yaml", []byte(c.doc), opts)
		parserOK := len(probs) == 0
		if parserOK != c.ok {
			t.Errorf("%s: the parser accepts it: %v, the case says %v (%v)", c.name, parserOK, c.ok, probs)
			continue
		}
		docs, err := yamlDocuments([]byte(c.doc))
		if err != nil || len(docs) != 1 {
			t.Fatalf("%s: %d documents, %v", c.name, len(docs), err)
		}
		err = s.Validate(docs[0])
		if schemaOK := err == nil; schemaOK != c.ok {
			t.Errorf("%s: the parser accepts it: %v, the schema: %v (%v)", c.name, c.ok, schemaOK, err)
		}
	}
}

// TestSizePatternMatchesParseSize holds the schema's size pattern to the
// parser's size.Parse, suffix by suffix.
func TestSizePatternMatchesParseSize(t *testing.T) {
	re := regexp.MustCompile(size.Pattern())
	for _, num := range []string{"0", "1", "10", "007", ""} {
		for _, unit := range []string{"", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
			"m", "ki", "KI", "KiB", "GB", "B", "i", " Gi", "Gi "} {
			s := num + unit
			n, err := size.Parse(s)
			parserOK := err == nil && n > 0
			if re.MatchString(s) != parserOK {
				t.Errorf("size %q: pattern matches %v, ParseSize gives %d, %v", s, re.MatchString(s), n, err)
			}
		}
	}
}
