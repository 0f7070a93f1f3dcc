package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// TestCSISanity runs csi-test's pkg/sanity against the real agent
// serving CSI, with loop-image volumes. volumed serves no controller
// (volumes are pre-provisioned), so the [Controller Server] specs are
// skipped by that capability; the node specs get their volumes from a
// stand-in provisioner (see provisioner) and must all pass.
func TestCSISanity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.startCSI()
	e.csiReady(conn)

	caps, err := csipb.NewIdentityClient(conn).GetPluginCapabilities(context.Background(), &csipb.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	skip := []string{}
	if !hasService(caps, csipb.PluginCapability_Service_CONTROLLER_SERVICE) {
		skip = append(skip, `\[Controller Server\]`)
	}
	if !hasService(caps, csipb.PluginCapability_Service_GROUP_CONTROLLER_SERVICE) {
		skip = append(skip, `\[GroupController Server\]`, `\[GroupController VolumeGroupSnapshots\]`)
	}
	proxy := filepath.Join(e.dir, "provisioner.sock")
	serveProvisioner(t, proxy, e.images, conn)

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + proxy
	cfg.TargetPath = filepath.Join(e.mnt, "csi-target")
	cfg.StagingPath = filepath.Join(e.mnt, "csi-staging")
	// btrfs is refused below 256 MiB; the images are sparse.
	cfg.TestVolumeSize = 300 << 20
	cfg.TestVolumeExpandSize = 360 << 20
	cfg.IdempotentCount = 3
	sanity.GinkgoTest(&cfg)

	var counts = map[string][]string{}
	ginkgo.ReportAfterSuite("volumed csi-sanity", func(r ginkgo.Report) {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt {
				continue
			}
			name := strings.Join(append(s.ContainerHierarchyTexts, s.LeafNodeText), " ")
			st := s.State.String()
			if s.State.Is(types.SpecStateSkipped) && s.Failure.Message != "" {
				name += " (" + s.Failure.Message + ")"
			}
			counts[st] = append(counts[st], name)
		}
	})
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.SkipStrings = skip
	reporter.Succinct = true
	ok := ginkgo.RunSpecs(t, "volumed CSI sanity", suite, reporter)

	var kinds []string
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "%s: %d\n", k, len(counts[k]))
	}
	for _, k := range []string{"pending", "skipped", "failed"} {
		for _, n := range counts[k] {
			fmt.Fprintf(&b, "  %s: %s\n", k, n)
		}
	}
	t.Logf("csi-sanity specs:\n%s", b.String())
	if !ok {
		t.Fatal("csi-sanity failed")
	}
	// Every spec that is not the controller's must pass, but the one
	// asking for NodeGetStorageHealth, a capability volumed does not
	// claim (it has no storage pool of its own to report on).
	for _, n := range counts["skipped"] {
		if !strings.Contains(n, "Controller") && !strings.Contains(n, "NodeGetStorageHealth") {
			t.Errorf("node spec skipped: %s", n)
		}
	}
	if n := len(counts["passed"]); n < 29 {
		t.Errorf("%d specs passed, want at least 29: the node specs did not all run", n)
	}
	if n := len(counts["failed"]); n > 0 {
		t.Errorf("%d specs failed", n)
	}
}

func hasService(caps *csipb.GetPluginCapabilitiesResponse, want csipb.PluginCapability_Service_Type) bool {
	for _, c := range caps.GetCapabilities() {
		if c.GetService().GetType() == want {
			return true
		}
	}
	return false
}
