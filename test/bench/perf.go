package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// profiler records, with perf(1), the whole machine's CPU samples over
// one phase of the bench (-perf DIR): the agent's share is then read
// with `perf report -i DIR/PHASE.data --comm BINARY` (the binary's
// name, as the kernel keeps it: 15 bytes). System-wide,
// because a restart is over before perf could attach to the new process.
// The agent's symbols need a binary built without -s -w (make bench
// PROFILE=DIR builds one).
type profiler struct {
	dir  string
	comm string
	cmd  *exec.Cmd
}

func (p *profiler) start(phase string) {
	if p == nil || p.dir == "" {
		return
	}
	check(os.MkdirAll(p.dir, 0o755))
	out := filepath.Join(p.dir, phase+".data")
	p.cmd = exec.Command("perf", "record", "-a", "-g", "-F", "1999", "-o", out)
	p.cmd.Stderr = nil
	if err := p.cmd.Start(); err != nil {
		check(fmt.Errorf("PROFILE= records with perf (Debian: apt-get install linux-perf): %w", err))
	}
	time.Sleep(time.Second) // perf's own start, before the phase begins
}

func (p *profiler) stop() {
	if p == nil || p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	fmt.Printf("  profile: perf report -i %s --comm %s\n", p.cmd.Args[len(p.cmd.Args)-1], p.comm)
	p.cmd = nil
}
