// Command powercut is the guest side of test/os's TestPowerCut, one static
// binary instead of shell loops: under TCG every fork and exec of a shell
// script costs the one emulated CPU that volumed needs, and the writer's
// loop forked a few hundred times a second beside the agent it measures.
// It reports on the serial console with guest/lib.sh's marks.
//
//	powercut write VOLUME...      as each /srv/VOLUME is mounted: kv ready.VOLUME UUID,
//	                              then numbered files, each reported (kv synced.VOLUME N)
//	                              only once it and its directory were fsync'd
//	powercut signatures PREFIX    kv PREFIX.NAME UUID of each loop image and GPT partition
//	powercut check EXPECT VOLUME...  each volume mounted once, staged at most once,
//	                              kv fs.VOLUME UUID, every file in EXPECT intact
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: powercut write VOLUME... | signatures PREFIX | check EXPECT VOLUME...")
		os.Exit(2)
	}
	con, err := os.OpenFile(envOr("OSTEST_CONSOLE", "/dev/ttyS0"), os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := console{con}
	switch os.Args[1] {
	case "write":
		write(c, os.Args[2:])
	case "signatures":
		signatures(c, os.Args[2])
	case "check":
		check(c, os.Args[2], os.Args[3:])
	default:
		fmt.Fprintf(os.Stderr, "powercut: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// console writes lib.sh's marked lines, one write each.
type console struct{ f *os.File }

func (c console) say(format string, a ...any) { fmt.Fprintf(c.f, format+"\n", a...) }
func (c console) kv(k, v string)              { c.say("OSTEST-KV %s %s", k, v) }
func (c console) fail(format string, a ...any) {
	c.say("OSTEST-FAIL %s", strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", " "))
}

// mounts maps each mount point of /proc/self/mountinfo to its sources,
// one per mount stacked there.
func mounts() map[string][]string {
	out := map[string][]string{}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		for i, x := range f {
			if x == "-" && i+2 < len(f) && len(f) > 4 {
				out[f[4]] = append(out[f[4]], f[i+2])
				break
			}
		}
	}
	return out
}

// uuids probes every path with one blkid -p (low-level: not udev's cache)
// and returns each one's fields.
func uuids(paths []string) map[string]map[string]string {
	out := map[string]map[string]string{}
	if len(paths) == 0 {
		return out
	}
	// blkid exits 2 when one of them holds nothing: the output still
	// lists the others.
	b, _ := exec.Command("blkid", append([]string{"-p", "-o", "export"}, paths...)...).Output()
	var cur map[string]string
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		if k == "DEVNAME" {
			cur = map[string]string{}
			out[v] = cur
			continue
		}
		if cur != nil {
			cur[k] = v
		}
	}
	return out
}

func write(c console, vols []string) {
	n := map[string]int{}
	all := false
	for {
		m := mounts()
		mounted := 0
		for _, v := range vols {
			dir := "/srv/" + v
			src := m[dir]
			if len(src) == 0 {
				continue
			}
			mounted++
			if n[v] == 0 {
				c.kv("ready."+v, uuids(src[:1])[src[0]]["UUID"])
			}
			if err := writeSynced(dir, n[v]+1, v); err != nil {
				continue
			}
			n[v]++
			c.kv("synced."+v, strconv.Itoa(n[v]))
		}
		if mounted == len(vols) && !all {
			all = true
			c.say("OSTEST-KV phase all-mounted")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeSynced writes dir/fN and returns only once the file and the
// directory entry are on disk.
func writeSynced(dir string, i int, v string) error {
	f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "file %d of %s\n", i, v)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func signatures(c console, prefix string) {
	imgs, _ := filepath.Glob("/var/lib/ostest/*.img")
	parts, _ := filepath.Glob("/dev/vd*[0-9]")
	found := uuids(append(imgs, parts...))
	for _, p := range imgs {
		c.kv(prefix+"."+strings.TrimSuffix(filepath.Base(p), ".img"), found[p]["UUID"])
	}
	for _, p := range parts {
		if name := found[p]["PART_ENTRY_NAME"]; name != "" {
			c.kv(prefix+"."+name, found[p]["UUID"])
		}
	}
}

func check(c console, expect string, vols []string) {
	m := mounts()
	var srcs []string
	for _, v := range vols {
		if n := len(m["/srv/"+v]); n != 1 {
			c.fail("/srv/%s mounted %d times", v, n)
		}
		if n := len(m["/var/lib/volumed/staging/"+v]); n > 1 {
			c.fail("%s staged %d times", v, n)
		}
		if s := m["/srv/"+v]; len(s) > 0 {
			srcs = append(srcs, s[0])
		}
	}
	found := uuids(srcs)
	for _, v := range vols {
		if s := m["/srv/"+v]; len(s) > 0 {
			c.kv("fs."+v, found[s[0]]["UUID"])
		}
	}
	b, err := os.ReadFile(expect)
	if err != nil {
		c.fail("read %s: %v", expect, err)
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		v, ns, _ := strings.Cut(sc.Text(), " ")
		n, _ := strconv.Atoi(ns)
		for i := 1; i <= n; i++ {
			want := fmt.Sprintf("file %d of %s\n", i, v)
			got, err := os.ReadFile(fmt.Sprintf("/srv/%s/f%d", v, i))
			if err != nil || string(got) != want {
				c.fail("%s: f%d, fsync'd before the cut, is lost: %q %v", v, i, firstN(got, 80), err)
			}
		}
	}
}

func firstN(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
