package nvme

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeNS is a namespace the fake target exports.
type fakeNS struct {
	nsid    int
	sectors int64
}

// fakeFabrics is a fake of the kernel boundary this machine lacks (no
// NVMe here): /dev/nvme-fabrics plus the sysfs and /dev entries the
// kernel makes and removes, laid out as Linux 6.x does:
//
//	class/nvme/nvme0 -> ../../devices/virtual/nvme-fabrics/ctl/nvme0
//	devices/virtual/nvme-fabrics/ctl/nvme0/{address,subsysnqn,transport,state,cntlid,hostnqn,...}
//	  nvme0n1/{nsid,size,holders/}          without native multipath
//	  nvme0c0n1/{nsid,size}                 with it (hidden path device)
//	class/nvme-subsystem/nvme-subsys0 -> ../../devices/virtual/nvme-subsystem/nvme-subsys0
//	devices/virtual/nvme-subsystem/nvme-subsys0/{subsysnqn,nvme0 -> ../../nvme-fabrics/ctl/nvme0}
//	  nvme0n1/{nsid,size,holders/}          the multipath head
//
// delete_controller is a FIFO read by a goroutine that removes the
// controller as the kernel would, so what the client writes is seen.
type fakeFabrics struct {
	t         *testing.T
	sys, dev  string
	multipath bool
	// namespaces exported by each subsystem NQN; the head instance (the
	// Y of nvmeXnY) is the position in the list plus one, so it differs
	// from the nsid as it does on real targets.
	namespaces map[string][]fakeNS
	// noDevNode leaves /dev nodes to be made later (udev is slow).
	noDevNode bool
	// connectErr is returned by Connect instead of connecting;
	// onConnect runs inside Connect (before connectErr is returned).
	connectErr error
	onConnect  func()

	kernel  sync.Mutex // the kernel's nvmf_dev_mutex: one connect at a time
	mu      sync.Mutex
	calls   []string // option strings written to /dev/nvme-fabrics
	deleted []string // "nvmeN=<what was written to delete_controller>"
	fifos   []*os.File
	wg      sync.WaitGroup
}

func newFake(t *testing.T, multipath bool) *fakeFabrics {
	t.Helper()
	root := t.TempDir()
	f := &fakeFabrics{
		t: t, sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev"),
		multipath: multipath, namespaces: map[string][]fakeNS{},
	}
	for _, d := range []string{"class/nvme", "class/nvme-subsystem", "devices/virtual/nvme-fabrics/ctl", "devices/virtual/nvme-subsystem"} {
		mkdir(t, filepath.Join(f.sys, d))
	}
	mkdir(t, f.dev)
	t.Cleanup(func() {
		f.mu.Lock()
		for _, fd := range f.fifos {
			fd.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeFabrics) client() *Client {
	return &Client{SysRoot: f.sys, DevRoot: f.dev, Fabrics: f}
}

func (f *fakeFabrics) Connect(ctx context.Context, options string) (string, error) {
	f.kernel.Lock()
	defer f.kernel.Unlock()
	f.mu.Lock()
	f.calls = append(f.calls, options)
	f.mu.Unlock()
	if f.connectErr != nil {
		if f.onConnect != nil {
			f.onConnect()
		}
		return "", fmt.Errorf("write /dev/nvme-fabrics: %w", f.connectErr)
	}
	opt := map[string]string{}
	for kv := range strings.SplitSeq(options, ",") {
		k, v, _ := strings.Cut(kv, "=")
		opt[k] = v
	}
	// Without duplicate_connect, tcp and rdma refuse a second controller
	// to the same subsystem and address.
	if f.existing(opt["nqn"], "traddr="+opt["traddr"]+",trsvcid="+opt["trsvcid"]) {
		return "", fmt.Errorf("write /dev/nvme-fabrics: %w", unix.EALREADY)
	}
	name := f.addController(ctrlSpec{
		transport: opt["transport"], traddr: opt["traddr"], trsvcid: opt["trsvcid"],
		nqn: opt["nqn"], hostnqn: opt["hostnqn"], state: "live", srcAddr: "192.0.2.200",
	})
	if f.onConnect != nil {
		f.onConnect()
	}
	inst, _ := instanceOf(name)
	return fmt.Sprintf("instance=%d,cntlid=%d\n", inst, inst+1), nil
}

// existing reports whether a controller that is not being deleted
// connects to nqn at addr ("traddr=..,trsvcid=..").
func (f *fakeFabrics) existing(nqn, addr string) bool {
	entries, _ := os.ReadDir(filepath.Join(f.sys, "class/nvme"))
	for _, e := range entries {
		read := func(attr string) string {
			b, _ := os.ReadFile(filepath.Join(f.sys, "class/nvme", e.Name(), attr))
			return strings.TrimSpace(string(b))
		}
		state := read("state")
		if read("subsysnqn") == nqn && strings.HasPrefix(read("address")+",", addr+",") &&
			!strings.HasPrefix(state, "deleting") && state != "dead" {
			return true
		}
	}
	return false
}

func (f *fakeFabrics) optionCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeFabrics) deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

type ctrlSpec struct {
	transport, traddr, trsvcid, nqn, hostnqn, state, srcAddr string
}

// addController makes a controller as the kernel does on connect, with
// the lowest free instance, and returns its name.
func (f *fakeFabrics) addController(s ctrlSpec) string {
	t := f.t
	t.Helper()
	inst := 0
	for exists(filepath.Join(f.sys, "class/nvme", "nvme"+strconv.Itoa(inst))) {
		inst++
	}
	name := "nvme" + strconv.Itoa(inst)
	dir := filepath.Join(f.sys, "devices/virtual/nvme-fabrics/ctl", name)
	mkdir(t, dir)
	addr := "traddr=" + s.traddr + ",trsvcid=" + s.trsvcid
	if s.srcAddr != "" {
		addr += ",src_addr=" + s.srcAddr
	}
	if s.hostnqn == "" {
		s.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100"
	}
	attrs(t, dir, map[string]string{
		"address": addr, "transport": s.transport, "subsysnqn": s.nqn, "state": s.state,
		"cntlid": strconv.Itoa(inst + 1), "hostnqn": s.hostnqn,
		"hostid": "0f0e0d0c-0b0a-0908-0706-050403020100", "kato": "5",
		"ctrl_loss_tmo": "1800", "reconnect_delay": "10", "model": "Linux", "serial": "abc",
		"rescan_controller": "", "reset_controller": "",
	})
	f.serveDelete(name, filepath.Join(dir, "delete_controller"))
	symlink(t, "../../devices/virtual/nvme-fabrics/ctl/"+name, filepath.Join(f.sys, "class/nvme", name))

	subsys := f.subsystemOf(s.nqn, inst)
	sdir := filepath.Join(f.sys, "devices/virtual/nvme-subsystem", subsys)
	symlink(t, "../../nvme-fabrics/ctl/"+name, filepath.Join(sdir, name))
	sinst := strings.TrimPrefix(subsys, "nvme-subsys")
	for i, ns := range f.namespaces[s.nqn] {
		head := strconv.Itoa(i + 1)
		nsAttrs := map[string]string{"nsid": strconv.Itoa(ns.nsid), "size": strconv.FormatInt(ns.sectors, 10)}
		var disk string
		if f.multipath {
			attrs(t, filepath.Join(dir, "nvme"+sinst+"c"+strconv.Itoa(inst)+"n"+head), nsAttrs)
			disk = filepath.Join(sdir, "nvme"+sinst+"n"+head)
		} else {
			disk = filepath.Join(dir, name+"n"+head)
		}
		if exists(disk) {
			continue
		}
		attrs(t, disk, nsAttrs)
		mkdir(t, filepath.Join(disk, "holders"))
		if !f.noDevNode {
			f.makeDevNode(filepath.Base(disk))
		}
	}
	return name
}

func (f *fakeFabrics) makeDevNode(name string) {
	if err := os.WriteFile(filepath.Join(f.dev, name), nil, 0o600); err != nil {
		f.t.Error(err)
	}
}

// subsystemOf returns the subsystem of nqn, made on first use and named
// after the first controller's instance as Linux 6.x does.
func (f *fakeFabrics) subsystemOf(nqn string, inst int) string {
	t := f.t
	base := filepath.Join(f.sys, "devices/virtual/nvme-subsystem")
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if b, _ := os.ReadFile(filepath.Join(base, e.Name(), "subsysnqn")); strings.TrimSpace(string(b)) == nqn {
			return e.Name()
		}
	}
	name := "nvme-subsys" + strconv.Itoa(inst)
	attrs(t, filepath.Join(base, name), map[string]string{"subsysnqn": nqn, "iopolicy": "numa"})
	symlink(t, "../../devices/virtual/nvme-subsystem/"+name, filepath.Join(f.sys, "class/nvme-subsystem", name))
	return name
}

// serveDelete makes delete_controller a FIFO and removes the controller
// once something is written to it.
func (f *fakeFabrics) serveDelete(name, fifo string) {
	if err := unix.Mkfifo(fifo, 0o200); err != nil {
		f.t.Fatal(err)
	}
	// O_RDWR: opening does not wait for a writer, and the client's
	// O_WRONLY open does not wait for us.
	fd, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.fifos = append(f.fifos, fd)
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer fd.Close()
		buf := make([]byte, 64)
		n, err := fd.Read(buf)
		if err != nil {
			return // the test ended
		}
		f.mu.Lock()
		f.deleted = append(f.deleted, name+"="+string(buf[:n]))
		f.mu.Unlock()
		f.remove(name)
	}()
}

// remove deletes a controller as the kernel does: its device and class
// link, its namespaces' nodes, and the subsystem with its heads when it
// was the last controller.
func (f *fakeFabrics) remove(name string) {
	rm := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			f.t.Error(err)
		}
	}
	dir := filepath.Join(f.sys, "devices/virtual/nvme-fabrics/ctl", name)
	if !f.multipath {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), name+"n") {
				rm(filepath.Join(f.dev, e.Name()))
			}
		}
	}
	base := filepath.Join(f.sys, "devices/virtual/nvme-subsystem")
	subs, _ := os.ReadDir(base)
	for _, s := range subs {
		sdir := filepath.Join(base, s.Name())
		if !exists(filepath.Join(sdir, name)) {
			continue
		}
		rm(filepath.Join(sdir, name))
		entries, _ := os.ReadDir(sdir)
		last := true
		for _, e := range entries {
			if _, ok := instanceOf(e.Name()); ok {
				last = false
			}
		}
		if last {
			for _, e := range entries {
				if _, ok := namespaceName(e.Name()); ok {
					rm(filepath.Join(f.dev, e.Name()))
				}
			}
			rm(filepath.Join(f.sys, "class/nvme-subsystem", s.Name()))
			rm(sdir)
		}
	}
	// The class link goes last: once it is gone the client may look at
	// /dev and must find the nodes gone too, as the kernel's synchronous
	// delete guarantees.
	rm(dir)
	rm(filepath.Join(f.sys, "class/nvme", name))
}

// setState changes a controller's state, as a transport failure does.
func (f *fakeFabrics) setState(name, state string) {
	attrs(f.t, filepath.Join(f.sys, "class/nvme", name), map[string]string{"state": state})
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// attrs writes sysfs-style attributes (value and a newline) into dir.
func attrs(t *testing.T, dir string, kv map[string]string) {
	t.Helper()
	mkdir(t, dir)
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, fs.ErrNotExist)
}
