package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// editOne edits the manifests of a few volumes one at a time (each gets a
// second target) and prints, for the median edit, the agent's CPU (all
// its threads, user and system, in ns: /proc/PID/task/*/schedstat) and
// the wall time from the write to the new mount in the mount table: what
// one change among N costs the agent.
func (b *agentRun) editOne(images []string, edits int) {
	var cpus, walls []time.Duration
	for e := range min(edits, len(images)) {
		i := e * len(images) / edits
		extra := filepath.Join(b.work, "mnt", fmt.Sprintf("v%03d-edit", i))
		m := fmt.Sprintf("apiVersion: volumed/v1\nkind: Volume\nmetadata: {name: v%03d}\nspec:\n  source: {loop: {file: %s}}\n  filesystem: {type: ext4}\n  mounts: [{path: %s}, {path: %s}]\n",
			i, images[i], filepath.Join(b.work, "mnt", fmt.Sprintf("v%03d", i)), extra)
		// Written aside and renamed in, as a package or an editor does.
		p := filepath.Join(b.conf(), fmt.Sprintf("v%03d.yaml", i))
		check(os.WriteFile(p+".tmp", []byte(m), 0o644))
		cpu0 := b.cpuNanos()
		start := time.Now()
		check(os.Rename(p+".tmp", p))
		for !mounted(extra) {
			if time.Since(start) > time.Minute {
				fail("the edited volume's new target was not mounted within a minute")
			}
			time.Sleep(time.Millisecond)
		}
		walls = append(walls, time.Since(start))
		// The pass that follows the outcome (the status, no kernel work).
		time.Sleep(50 * time.Millisecond)
		cpus = append(cpus, time.Duration(b.cpuNanos()-cpu0))
	}
	slices.Sort(cpus)
	slices.Sort(walls)
	fmt.Printf("one manifest edit among %d (a second target; median of %d): agent CPU %v (target <= 5 ms; range %v-%v), write to mounted %v\n",
		len(images), len(cpus), cpus[len(cpus)/2].Round(10*time.Microsecond), cpus[0].Round(10*time.Microsecond), cpus[len(cpus)-1].Round(10*time.Microsecond), walls[len(walls)/2].Round(100*time.Microsecond))
}

func mounted(p string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	check(err)
	return strings.Contains(string(data), " "+p+" ")
}

// cpuNanos is the CPU time of every thread of the agent so far.
func (b *agentRun) cpuNanos() int64 {
	dir := fmt.Sprintf("/proc/%d/task", b.cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	check(err)
	var sum int64
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			sum += v
		}
	}
	return sum
}
