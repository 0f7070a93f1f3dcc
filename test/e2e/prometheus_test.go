package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/internal/testtool"
)

// prometheusAPI asks a Prometheus HTTP API endpoint and decodes its data.
func prometheusAPI(t *testing.T, base, path string, data any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s: %w: %s", path, err, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s", path, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// eventually polls check until it returns nil; the deadline is a failure
// bound for a loaded machine, not a performance assertion.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %v", what, err)
}

// TestPrometheusAlerts runs Debian's prometheus against a running agent
// with the shipped alert rules (their "for" cut to a second): the target
// is up, volumed_volume_phase answers, and a refused manifest and a volume
// that cannot attach fire VolumedManifestRefused and VolumedVolumeNotReady.
func TestPrometheusAlerts(t *testing.T) {
	t.Parallel()
	prom := testtool.Need(t, "Debian: prometheus", "prometheus")[0]
	e := newEnv(t)
	e.unattachable("stuck")
	e.write("broken.yaml", "apiVersion: volumed/v1\nkind: Volume\nmetadata: { name: broken\n")
	metrics := freeAddr(t)
	e.extraArgs = []string{"--metrics-address", metrics}
	e.start()

	rules, err := os.ReadFile("../../packaging/prometheus/volumed-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fast := regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 1s"))
	if string(fast) == string(rules) {
		t.Fatal("the alert rules have no for: to shorten")
	}
	dir := filepath.Join(e.dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "volumed-alerts.yaml")
	configFile := filepath.Join(dir, "prometheus.yml")
	writeFile(t, rulesFile, string(fast))
	writeFile(t, configFile, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: volumed
    static_configs:
      - targets: [%q]
`, rulesFile, metrics))
	web := freeAddr(t)
	cmd := exec.Command(prom, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	// One writer for both: exec then copies them with one goroutine, and
	// the log is read only after Wait.
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // fails only if it has exited, which Wait says
		if err := cmd.Wait(); t.Failed() {
			t.Logf("prometheus (%v) log:\n%s", err, log.String())
		}
	})
	base := "http://" + web

	eventually(t, "the volumed target up", func() error {
		var targets struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
				ScrapeURL string `json:"scrapeUrl"`
			} `json:"activeTargets"`
		}
		if err := prometheusAPI(t, base, "/api/v1/targets", &targets); err != nil {
			return err
		}
		if len(targets.ActiveTargets) != 1 || targets.ActiveTargets[0].Health != "up" {
			return fmt.Errorf("targets %+v", targets.ActiveTargets)
		}
		return nil
	})

	eventually(t, "volumed_volume_phase of stuck", func() error {
		var res struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		q := url.QueryEscape(`volumed_volume_phase{volume="stuck"} == 1`)
		if err := prometheusAPI(t, base, "/api/v1/query?query="+q, &res); err != nil {
			return err
		}
		if len(res.Result) != 1 || res.Result[0].Metric["phase"] == "Ready" {
			return fmt.Errorf("result %+v", res.Result)
		}
		return nil
	})

	eventually(t, "VolumedManifestRefused and VolumedVolumeNotReady{volume=stuck} firing", func() error {
		var res struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if err := prometheusAPI(t, base, "/api/v1/alerts", &res); err != nil {
			return err
		}
		firing := map[string]bool{}
		for _, a := range res.Alerts {
			if a.State == "firing" {
				firing[a.Labels["alertname"]+"/"+a.Labels["volume"]] = true
			}
		}
		if !firing["VolumedManifestRefused/"] || !firing["VolumedVolumeNotReady/stuck"] {
			return fmt.Errorf("alerts %+v", res.Alerts)
		}
		if firing["VolumedDown/"] {
			return fmt.Errorf("VolumedDown fires for a running agent: %+v", res.Alerts)
		}
		return nil
	})
}
