package crashcheck

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/drivers/loop"
	"github.com/volumed/volumed/internal/logwrites"
	"github.com/volumed/volumed/test/agenttest"
)

// check runs the agent on the state prepared in dir and says what broke.
func check(ctx context.Context, c Case, st logwrites.State, dir string) (res Result) {
	res.State = st
	defer agenttest.Cleanup(dir, c.Logf)
	fail := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	root, mnt, config := filepath.Join(dir, "root"), filepath.Join(dir, "mnt"), filepath.Join(dir, "config")
	if err := mountImage(filepath.Join(dir, "disk.img"), root); err != nil {
		fail("%v", err)
		return res
	}
	before := map[string]signature{}
	for _, v := range c.Volumes {
		s, err := probe(filepath.Join(root, v.Image))
		if err != nil {
			fail("%v", err)
			return res
		}
		before[v.Name] = s
	}
	for _, k := range c.Known {
		if k.After < st.End && before[k.Volume].UUID != k.UUID {
			fail("%s: held filesystem %s once Ready (before entry %d), the disk has %q", k.Volume, k.UUID, k.After, before[k.Volume].UUID)
		}
	}
	res.Damaged = damaged(filepath.Join(root, c.StateDir, "state.db"), filepath.Join(dir, "pre-state.db"))
	if err := writeManifests(c, config, root, mnt); err != nil {
		fail("%v", err)
		return res
	}
	socket := filepath.Join(dir, "volumed.sock")
	p, err := agenttest.Start(nil, c.Bin, []string{"run", "--config-dir", config, "--state-dir", filepath.Join(root, c.StateDir),
		"--socket", socket, "--metrics-address", "", "--log-level", "debug"})
	if err != nil {
		fail("start the agent: %v", err)
		return res
	}
	defer p.Signal(syscall.SIGKILL)
	wctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	status, err := agenttest.WaitStatus(wctx, socket, func(s *api.Status) bool { return allReady(s, c.Volumes) })
	if err != nil {
		fail("volumes not Ready: %v; status %s", err, agenttest.Dump(status))
		res.Log = p.Logs()
		return res
	}
	res.Recovered = status.StateRecovery != ""
	if res.Damaged != "" && !res.Recovered {
		fail("the state file was damaged (bbolt: %s) and the agent did not say so", res.Damaged)
	}
	for _, prob := range status.Problems {
		fail("status problem: %s", prob)
	}
	for _, v := range c.Volumes {
		res.Formatted = append(res.Formatted, checkVolume(fail, v, before[v.Name], root, status)...)
		checkMounted(fail, v, mnt)
	}
	for _, pr := range c.Proofs {
		if pr.After >= st.End {
			continue
		}
		target := ""
		for _, v := range c.Volumes {
			if v.Name == pr.Volume {
				target = v.Target
			}
		}
		b, err := os.ReadFile(filepath.Join(mnt, target, pr.Path))
		if err != nil || string(b) != pr.Content {
			fail("%s: %s, fsync'd before entry %d, is lost: %q, %v", pr.Volume, pr.Path, pr.After, b, err)
		}
	}
	if len(res.Problems) > 0 {
		res.Log = p.Logs()
	}
	return res
}

func allReady(s *api.Status, vols []Volume) bool {
	for _, v := range vols {
		if got := agenttest.Find(s, v.Name); got == nil || got.Phase != api.PhaseReady {
			return false
		}
	}
	return true
}

// checkVolume: the filesystem the image had is the one it has; the agent's
// device is a loop device of the image. It returns the volume's name if
// the image was blank and is formatted now.
func checkVolume(fail func(string, ...any), v Volume, was signature, root string, st *api.Status) []string {
	img := filepath.Join(root, v.Image)
	now, err := probe(img)
	if err != nil {
		fail("%v", err)
		return nil
	}
	if was.UUID != "" && now.UUID != was.UUID {
		fail("%s: its %s filesystem %s was formatted again (now %s %s)", v.Name, was.Type, was.UUID, now.Type, now.UUID)
	}
	for _, e := range agenttest.Find(st, v.Name).Events {
		if e.Op == "format" && e.Result == "success" && was.Type != "" {
			fail("%s: formatted though it held %s %s", v.Name, was.Type, was.UUID)
		}
	}
	devs, err := loop.List()
	if err != nil {
		fail("list loop devices: %v", err)
		return nil
	}
	n := 0
	for _, d := range devs {
		if d.BackingFile == img {
			n++
			if d.Path != agenttest.Find(st, v.Name).Device {
				fail("%s: status says device %s, the image is on %s", v.Name, agenttest.Find(st, v.Name).Device, d.Path)
			}
		}
	}
	if n != 1 {
		fail("%s: %d loop devices of its image, want 1", v.Name, n)
	}
	if was.Type == "" && now.Type != "" {
		return []string{v.Name}
	}
	return nil
}

func checkMounted(fail func(string, ...any), v Volume, mnt string) {
	target := filepath.Join(mnt, v.Target)
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(ms) != 1 {
		fail("%s: target %s mounted %d times (%v), want once", v.Name, target, len(ms), err)
	}
}

// writeManifests writes the case's manifests with their paths made real.
func writeManifests(c Case, config, root, mnt string) error {
	for _, d := range []string{config, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	r := strings.NewReplacer(Root, root, Mnt, mnt)
	for name, text := range c.Manifests {
		if err := os.WriteFile(filepath.Join(config, name), []byte(r.Replace(text)), 0o644); err != nil {
			return err
		}
	}
	return nil
}
