// Package packaging_test checks the monitoring files shipped next to the
// binary: the Prometheus alerting rules and the Grafana dashboard. Both are
// written by hand against the metric names of design §6, and nothing else
// would notice when one of them drifts from what agent/metrics.go exports.
package packaging_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/volumed/volumed/internal/testtool"
)

const (
	rulesFile     = "prometheus/volumed-alerts.yaml"
	rulesTestFile = "prometheus/volumed-alerts_test.yaml"
	dashboardFile = "grafana/volumed-dashboard.json"
)

// metrics is what volumed exports (design §6, agent/metrics.go); true marks
// a histogram, whose series carry the _bucket, _count and _sum suffixes.
var metrics = map[string]bool{
	"volumed_volume_phase":                  false,
	"volumed_volume_condition":              false,
	"volumed_volume_encrypted":              false,
	"volumed_operation_duration_seconds":    true,
	"volumed_operation_errors_total":        false,
	"volumed_reconcile_duration_seconds":    true,
	"volumed_manifest_errors":               false,
	"volumed_volume_capacity_bytes":         false,
	"volumed_volume_available_bytes":        false,
	"volumed_volume_used_bytes":             false,
	"volumed_volume_inodes":                 false,
	"volumed_volume_inodes_free":            false,
	"volumed_volume_inodes_used":            false,
	"volumed_state_commit_duration_seconds": true,
	"volumed_state_file_recoveries_total":   false,
	"volumed_build_info":                    false,
}

var metricName = regexp.MustCompile(`volumed_[a-z_]+`)

// referencedMetrics returns the exported metric each volumed_ name in expr
// stands for, or an error naming the first one volumed does not export.
func referencedMetrics(expr string) ([]string, error) {
	var out []string
	for _, name := range metricName.FindAllString(expr, -1) {
		base, ok := exportedBase(name)
		if !ok {
			return nil, fmt.Errorf("unknown metric %s", name)
		}
		out = append(out, base)
	}
	return out, nil
}

func exportedBase(name string) (string, bool) {
	if _, ok := metrics[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, found := strings.CutSuffix(name, suffix)
		if found && metrics[base] {
			return base, true
		}
	}
	return "", false
}

func TestReferencedMetrics(t *testing.T) {
	for expr, want := range map[string]string{
		`rate(volumed_operation_duration_seconds_bucket[5m])`: "volumed_operation_duration_seconds",
		`volumed_state_commit_duration_seconds_count`:         "volumed_state_commit_duration_seconds",
		`volumed_volume_inodes_used / volumed_volume_inodes`:  "volumed_volume_inodes_used",
	} {
		got, err := referencedMetrics(expr)
		if err != nil || len(got) == 0 || got[0] != want {
			t.Errorf("referencedMetrics(%q) = %v, %v; want %s first", expr, got, err, want)
		}
	}
	for _, expr := range []string{
		`volumed_volume_phases`,          // typo
		`volumed_manifest_errors_bucket`, // not a histogram
		`volumed_volume_used`,            // missing unit
	} {
		if got, err := referencedMetrics(expr); err == nil {
			t.Errorf("referencedMetrics(%q) = %v, want an unknown-metric error", expr, got)
		}
	}
}

// ruleFile is the Prometheus rule file format, strict enough to catch a
// misspelt key, which Prometheus itself would refuse at load time.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           *string           `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

func loadRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f ruleFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		if g.Name == "" {
			t.Errorf("%s: a group has no name", rulesFile)
		}
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertRulesStructure runs without promtool: it is all a host without
// the prometheus package gets, so it checks what an operator relies on.
func TestAlertRulesStructure(t *testing.T) {
	rules := loadRules(t)
	seen := map[string]bool{}
	for i, r := range rules {
		name := r.Alert
		if name == "" {
			t.Errorf("rule %d is not an alert (record %q)", i, r.Record)
			continue
		}
		if seen[name] {
			t.Errorf("%s: defined twice; routing and silences by alertname would hit both", name)
		}
		seen[name] = true
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: no expr", name)
		}
		if _, err := referencedMetrics(r.Expr); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if r.For == nil || !promDuration.MatchString(*r.For) {
			t.Errorf("%s: for must be a Prometheus duration, got %v", name, r.For)
		}
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" && sev != "info" {
			t.Errorf("%s: labels.severity = %q, want warning, critical or info", name, sev)
		}
		for _, key := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[key]) == "" {
				t.Errorf("%s: no annotations.%s", name, key)
			}
		}
		// A fleet alert that does not say which host is useless at 3 a.m.
		if !strings.Contains(r.Annotations["summary"], "$labels.instance") {
			t.Errorf("%s: summary does not name $labels.instance", name)
		}
		if strings.Contains(r.Expr, "volumed_volume_") && !strings.Contains(r.Annotations["summary"], "$labels.volume") {
			t.Errorf("%s: a per-volume alert whose summary does not name $labels.volume", name)
		}
	}
	for _, want := range []string{
		"VolumedVolumeNotReady", "VolumedVolumeCondition", "VolumedOperationFailing", "VolumedFilesystemAlmostFull",
		"VolumedFilesystemInodesAlmostFull", "VolumedManifestRefused", "VolumedStateFileRecovered", "VolumedDown",
	} {
		if !seen[want] {
			t.Errorf("alert %s missing from %s", want, rulesFile)
		}
	}
}

// promtool returns the path of promtool: nothing else can evaluate
// PromQL here (testtool: missing, it fails under CI and skips elsewhere).
func promtool(t *testing.T) string {
	t.Helper()
	return testtool.Need(t, "Debian: prometheus", "promtool")[0]
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestAlertRulesPromtoolCheck(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

// TestAlertRulesPromtoolUnit evaluates the rules on synthetic series: the
// alerts fire for a volume stuck outside Ready and a full filesystem, and
// stay quiet for Ready and Absent volumes.
func TestAlertRulesPromtoolUnit(t *testing.T) {
	runPromtool(t, "test", "rules", rulesTestFile)
}

type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name    string          `json:"name"`
			Type    string          `json:"type"`
			Multi   bool            `json:"multi"`
			Query   json.RawMessage `json:"query"`
			Def     string          `json:"definition"`
			Datasrc *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	GridPos    *gridPos    `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Format     string      `json:"format"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type gridPos struct{ X, Y, W, H int }

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) (dashboard, []panel) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var all []panel
	var flatten func([]panel)
	flatten = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			flatten(p.Panels)
		}
	}
	flatten(d.Panels)
	return d, all
}

func TestDashboard(t *testing.T) {
	d, _ := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title for provisioning, got %q %q", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d predates datasource references by uid", d.SchemaVersion)
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		switch v.Name {
		case "datasource":
			var q string
			if v.Type != "datasource" || json.Unmarshal(v.Query, &q) != nil || q != "prometheus" {
				t.Errorf("variable datasource must be of type datasource, query prometheus; got %s %s", v.Type, v.Query)
			}
		case "instance":
			if !v.Multi || !strings.Contains(v.Def, "label_values(volumed_build_info, instance)") {
				t.Errorf("variable instance must be multi-valued from label_values(volumed_build_info, instance); got multi=%v %q", v.Multi, v.Def)
			}
		}
		if v.Type == "query" {
			if v.Datasrc == nil || v.Datasrc.UID != "${datasource}" {
				t.Errorf("variable %s: datasource %+v, want uid ${datasource}", v.Name, v.Datasrc)
			}
			if _, err := referencedMetrics(v.Def); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
		}
	}
	for _, want := range []string{"datasource", "instance", "volume"} {
		if _, ok := vars[want]; !ok {
			t.Errorf("template variable %s missing", want)
		}
	}
}

func TestDashboardPanels(t *testing.T) {
	_, panels := loadDashboard(t)
	ids := map[int]string{}
	for _, p := range panels {
		if p.ID <= 0 {
			t.Errorf("panel %q has no id", p.Title)
		} else if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "" {
			t.Errorf("panel %d %q has no type", p.ID, p.Title)
		}
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.Y < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: gridPos %+v is not inside the 24-column grid", p.ID, p.Title, p.GridPos)
		}
	}
}

// Every panel but a row queries the dashboard's datasource, and every
// metric volumed exports is shown somewhere.
func TestDashboardQueries(t *testing.T) {
	_, panels := loadDashboard(t)
	used := map[string]bool{}
	heatmap := false
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %d %q: datasource %+v, want uid ${datasource} (a fixed uid breaks on import)", p.ID, p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no targets", p.ID, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %d %q target %s: no expr", p.ID, p.Title, tg.RefID)
				continue
			}
			if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q target %s: datasource %+v", p.ID, p.Title, tg.RefID, tg.Datasource)
			}
			names, err := referencedMetrics(tg.Expr)
			if err != nil {
				t.Errorf("panel %d %q target %s: %v", p.ID, p.Title, tg.RefID, err)
			}
			for _, n := range names {
				used[n] = true
			}
			if p.Type == "heatmap" && tg.Format == "heatmap" && strings.Contains(tg.Expr, "volumed_operation_duration_seconds_bucket") {
				heatmap = true
			}
		}
	}
	if !heatmap {
		t.Error("no heatmap panel of volumed_operation_duration_seconds_bucket in heatmap format")
	}
	var unused []string
	for name := range metrics {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("metrics shown in no panel: %v", unused)
	}
}

func TestDashboardPanelsDoNotOverlap(t *testing.T) {
	_, panels := loadDashboard(t)
	for i, a := range panels {
		for _, b := range panels[i+1:] {
			if a.GridPos == nil || b.GridPos == nil {
				continue // reported by TestDashboardPanels
			}
			p, q := *a.GridPos, *b.GridPos
			if p.X < q.X+q.W && q.X < p.X+p.W && p.Y < q.Y+q.H && q.Y < p.Y+p.H {
				t.Errorf("panels %d %q %+v and %d %q %+v overlap", a.ID, a.Title, p, b.ID, b.Title, q)
			}
		}
	}
}

// grafanaVar matches the dashboard's template variables; a range variable
// must become a duration, the others sit inside label matchers.
var (
	grafanaRangeVar = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)
	grafanaVar      = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
)

// TestDashboardQueriesParse has promtool parse every panel query, with
// Grafana's variables substituted, by wrapping each in a recording rule.
func TestDashboardQueriesParse(t *testing.T) {
	tool := promtool(t)
	_, panels := loadDashboard(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range panels {
		for _, tg := range p.Targets {
			expr := grafanaRangeVar.ReplaceAllString(tg.Expr, "5m")
			expr = grafanaVar.ReplaceAllString(expr, ".*")
			quoted, err := json.Marshal(expr) // a JSON string is a YAML string
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, tg.RefID, quoted)
			n++
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("dashboard queries do not parse: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("%d rules found", n); !slices.Contains(strings.Split(string(out), "\n"), "  SUCCESS: "+want) {
		t.Errorf("promtool did not check all %d queries:\n%s", n, out)
	}
}
