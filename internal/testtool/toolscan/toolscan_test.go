package toolscan

import (
	"strings"
	"testing"
)

const src = `package p

import (
	"context"
	"os/exec"

	"example/hostcheck"
	"example/testtool"
)

var guest = []string{"ip", "cryptsetup"}

type client struct{ Path string }

func (c *client) bin() string { return "cryptsetup2" }

func orDefault(v, d string) string {
	if v != "" {
		return v
	}
	return d
}

func run(ctx context.Context, prog string, args ...string) error {
	return exec.CommandContext(ctx, prog, args...).Run()
}

func runAll(ctx context.Context, name string) error { return run(ctx, name) }

func volume(name, file string) string { return name + file }

func f(ctx context.Context, fstype string, c *client) {
	exec.Command("losetup", "-f")
	exec.LookPath("blkid")
	testtool.Need(nil, "Debian: gdisk", "sgdisk", "sfdisk")
	var prog string
	switch fstype {
	case "ext4":
		prog = "mkfs.ext4"
	}
	exec.CommandContext(ctx, prog)
	_ = run(ctx, "resize2fs", "/dev/x")
	_ = runAll(ctx, "xfs_growfs")
	for _, tool := range guest {
		exec.LookPath(tool)
	}
	for _, pair := range [][2]string{{"qemu-img", "qemu-utils"}} {
		exec.LookPath(pair[0])
	}
	exec.Command(c.bin())
	exec.Command(orDefault(c.Path, "iscsiadm"))
	sg := testtool.Need(nil, "Debian: gdisk", "sgdisk2")[0]
	exec.Command(sg, "-v", "data-volume")
	exec.Command(volume("data", "img"))
	exec.Command(c.Path, "not-a-program")
}

var needs = map[string][]hostcheck.Program{"x": {{"mkfs.x", "why", "xpkg"}}}
var one = hostcheck.Program{Name: "nvme", Why: "w", Package: "nvme-cli"}
`

// Each way the suite names a program is found, and nothing else: not
// the install hint, an argument, nor a volume name.
func TestPackageFindsEveryForm(t *testing.T) {
	uses, err := Package(map[string][]byte{"p.go": []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range uses {
		names = append(names, u.Name)
	}
	got := strings.Join(names, " ")
	want := "blkid cryptsetup cryptsetup2 ip iscsiadm losetup mkfs.ext4 mkfs.x nvme qemu-img resize2fs sfdisk sgdisk sgdisk2 xfs_growfs"
	if got != want {
		t.Fatalf("found %q\nwant  %q", got, want)
	}
	if uses[0].At != "p.go:34" {
		t.Errorf("blkid found at %s, want p.go:34", uses[0].At)
	}
}
