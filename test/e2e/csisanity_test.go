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
// serving the Controller and Node services, provisioning loop-image
// volumes from a pool (--csi-loop-pool) on btrfs: the controller specs,
// the snapshot specs and the node specs (on the volumes the controller
// made) must all pass.
func TestCSISanity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sock := filepath.Join(e.dir, "csi.sock")
	// btrfs reflinks: the snapshot specs run too.
	pool := e.btrfsPool(4 << 30)
	e.extraArgs = []string{"--csi-endpoint", "unix://" + sock, "--node-id", csiNodeID,
		"--csi-loop-pool", pool, "--csi-loop-reserve", "0"}
	conn := e.startCSI()
	e.csiReady(conn)

	caps, err := csipb.NewIdentityClient(conn).GetPluginCapabilities(context.Background(), &csipb.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	skip := []string{}
	if !hasService(caps, csipb.PluginCapability_Service_GROUP_CONTROLLER_SERVICE) {
		skip = append(skip, `\[GroupController Server\]`, `\[GroupController VolumeGroupSnapshots\]`)
	}
	if !hasService(caps, csipb.PluginCapability_Service_CONTROLLER_SERVICE) {
		t.Fatal("no CONTROLLER_SERVICE with --csi-loop-pool")
	}

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	// ext4 grows online only with CAP_SYS_RESOURCE, which this machine's
	// tests lack (see drivers/blockfs); btrfs grows.
	cfg.TestVolumeParameters = map[string]string{"backend": "loop", "filesystem.type": "btrfs"}
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
	// Every spec must pass but those for a capability volumed does not
	// claim, each for the reason sanitySkip gives.
	for _, n := range counts["skipped"] {
		if sanitySkip(n) == "" {
			t.Errorf("spec skipped with no reason volumed accepts: %s", n)
		}
	}
	if n := len(counts["passed"]); n < 51 {
		t.Errorf("%d specs passed, want at least 51: the controller and node specs did not all run", n)
	}
	if n := len(counts["failed"]); n > 0 {
		t.Errorf("%d specs failed", n)
	}
	// The suite deletes every volume it made: their images must be gone,
	// and nothing promised any more.
	if left, _ := filepath.Glob(filepath.Join(pool, "*.img")); len(left) > 0 {
		t.Errorf("images left in the pool after every DeleteVolume: %v", left)
	}
	if r, err := csipb.NewControllerClient(conn).ListVolumes(context.Background(), &csipb.ListVolumesRequest{}); err != nil || len(r.GetEntries()) > 0 {
		t.Errorf("volumes listed after the suite: %v, %v", r, err)
	}
}

// sanitySkip says why a skipped spec may be skipped ("" if it may not):
// the capabilities volumed does not claim.
func sanitySkip(spec string) string {
	s := strings.ToLower(spec)
	for _, c := range []struct{ match, why string }{
		{"clon", "volumes are not cloned"},
		{"modify volume", "no mutable parameters (VolumeAttributeClass)"},
		{"modifyvolume", "no mutable parameters (VolumeAttributeClass)"},
		{"controllerlistvolumehealth", "health is the node's (NodeGetVolumeStats' condition)"},
		{"controllergetvolumehealth", "health is the node's (NodeGetVolumeStats' condition)"},
		{"controllerpublish", "a local volume has no attach step (no ControllerPublishVolume)"},
		{"controllerunpublish", "a local volume has no attach step (no ControllerPublishVolume)"},
		{"controller publish", "a local volume has no attach step (no ControllerPublishVolume)"},
		{"nodegetstoragehealth", "no storage pool health is reported"},
		{"groupcontroller", "no group controller"},
	} {
		if strings.Contains(s, c.match) {
			return c.why
		}
	}
	return ""
}

func hasService(caps *csipb.GetPluginCapabilitiesResponse, want csipb.PluginCapability_Service_Type) bool {
	for _, c := range caps.GetCapabilities() {
		if c.GetService().GetType() == want {
			return true
		}
	}
	return false
}
