package lvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/readonce"
	"github.com/volumed/volumed/internal/sysfs"
)

// Program is lvm2's one binary; every command is its subcommand.
const Program = "lvm"

// Runner runs `lvm` with an argument vector (the subcommand first); a
// failed run returns an error, and lvm2's reason is on stderr.
type Runner interface {
	Run(ctx context.Context, args []string) (stdout, stderr []byte, err error)
}

// ExecRunner runs the real lvm, without a shell.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, args []string) ([]byte, []byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, Program, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// lvm2 warns on stderr of every descriptor it inherits; Go passes
	// none but these, so the warning would only be noise.
	cmd.Env = append(os.Environ(), "LVM_SUPPRESS_FD_WARNINGS=1")
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// ErrBusy: the LV is open (mounted or held), so it is not deactivated.
var ErrBusy = errors.New("logical volume in use")

// Tool runs lvm2's commands through Runner; with Devices, every
// command runs with a filter of exactly those (FilterConfig).
type Tool struct {
	Runner  Runner
	Devices []string
}

// isReport: lvm2's commands that change nothing. A window of the
// context (internal/readonce) shares each of their reports among all
// who ask in it; any other command is a write, after which they run
// again.
func isReport(subcommand string) bool {
	return subcommand == "vgs" || subcommand == "lvs" || subcommand == "pvs"
}

// full is args as run: with the Tool's filter.
func (t Tool) full(args []string) []string {
	if len(t.Devices) > 0 {
		return Filtered(t.Devices, args...)
	}
	return args
}

func (t Tool) run(ctx context.Context, what string, args []string) ([]byte, error) {
	args = t.full(args)
	run := func() ([]byte, error) { return t.exec(ctx, what, args) }
	if isReport(args[0]) {
		return readonce.Read(ctx, strings.Join(args, "\x00"), run)
	}
	var out []byte
	err := readonce.Write(ctx, func() (err error) {
		out, err = run()
		return err
	})
	return out, err
}

func (t Tool) exec(ctx context.Context, what string, args []string) ([]byte, error) {
	r := t.Runner
	if r == nil {
		r = ExecRunner{}
	}
	out, stderr, err := r.Run(ctx, args)
	if err != nil {
		msg := strings.TrimSpace(string(stderr))
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("%s: lvm %s: %s", what, args[0], oneLine(msg))
	}
	return out, nil
}

// oneLine keeps lvm2's last few lines of stderr, joined: the reason is
// last; the warnings before it are noise in a status line.
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// VGsArgs lists every volume group: asking for all, not one by name,
// gives exit status 0 and an empty report when the VG is missing, so a
// missing VG is never told from a failed command by its stderr.
func VGsArgs() []string {
	return []string{"vgs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", strings.Join(vgFields, ",")}
}

// LVsArgs lists the LVs of vg.
func LVsArgs(vg string) []string {
	return append(AllLVsArgs(), vg)
}

// AllLVsArgs lists the LVs of every volume group lvm2 sees, each with
// its VG's fields (vgFields): the one lvs report, which Find, Tagged,
// ByUUID and a VG's LVs read alike.
func AllLVsArgs() []string {
	fields := append(slices.Clone(lvFields), slices.DeleteFunc(slices.Clone(vgFields), func(f string) bool { return f == "vg_name" })...)
	return []string{"lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "--binary", "-o", strings.Join(fields, ",")}
}

// CreateArgs makes w's LV, of its type, tagged, active. --zero and
// --wipesignatures clear what a removed LV left at its start; --yes
// answers lvm2's question before wiping one (there is no terminal). A
// thin LV (virtual size, in its pool) has neither: its blocks are not
// provisioned yet and read as zeros, and zeroing would provision one.
func CreateArgs(w Want) []string {
	if w.Type == Thin {
		return []string{"lvcreate", "--yes", "--type", Thin, "--name", w.Name,
			"--virtualsize", strconv.FormatInt(w.Size, 10) + "b", "--thinpool", w.ThinPool,
			"--addtag", Tag(w.Volume), "--activate", "y", w.VG}
	}
	size := []string{"--size", strconv.FormatInt(w.Size, 10) + "b"}
	if w.Extents != "" {
		size = []string{"--extents", w.Extents}
	}
	args := append(append(layoutArgs(w), "--name", w.Name), size...)
	return append(args, "--addtag", Tag(w.Volume), "--zero", "y", "--wipesignatures", "y", "--activate", "y", w.VG)
}

// ActivateArgs activates (y) or deactivates (n) lv. Activation ignores
// the LV's activation skip flag (-K): volumed activates only the LVs it
// keeps, and a volume restored from a CSI snapshot is a thin snapshot,
// which lvm2 marks to be skipped by every activation that does not say so.
func ActivateArgs(lv LV, on bool) []string {
	if on {
		return []string{"lvchange", "--activate", "y", "--ignoreactivationskip", lv.Ref()}
	}
	return []string{"lvchange", "--activate", "n", lv.Ref()}
}

// VGs lists the volume groups.
func (t Tool) VGs(ctx context.Context) ([]VG, error) {
	out, err := t.run(ctx, "list volume groups", VGsArgs())
	if err != nil {
		return nil, err
	}
	return ParseVGs(out)
}

// LVs lists the LVs of vg; found is false when there is no such VG.
func (t Tool) LVs(ctx context.Context, vg string) (lvs []LV, found bool, err error) {
	_, lvs, found, err = t.Group(ctx, vg)
	return lvs, found, err
}

// Group reads vg and its LVs (one vgs, one lvs); found is false when
// there is no such VG.
func (t Tool) Group(ctx context.Context, vg string) (v VG, lvs []LV, found bool, err error) {
	vgs, err := t.VGs(ctx)
	if err != nil {
		return VG{}, nil, false, err
	}
	i := indexVG(vgs, vg)
	if i < 0 {
		return VG{}, nil, false, nil
	}
	// Every VG's LVs hold vg's: the one report, when this window holds
	// it already, or when the filter shows lvm2 only vg's PVs (a PV is
	// in one VG), so that the two are one command.
	if _, held := readonce.Held(ctx, strings.Join(t.full(AllLVsArgs()), "\x00")); held || len(t.Devices) > 0 {
		lvs, err = t.allLVs(ctx)
		return vgs[i], slices.DeleteFunc(lvs, func(lv LV) bool { return lv.VG != vg }), true, err
	}
	out, err := t.run(ctx, "list the LVs of volume group "+vg, LVsArgs(vg))
	if err != nil {
		return vgs[i], nil, true, err
	}
	lvs, err = ParseLVs(out)
	return vgs[i], lvs, true, err
}

// Tagged lists the LVs of every volume group that carry one volume's
// tag (Owner), active or not: what volumed made, wherever it is now.
func (t Tool) Tagged(ctx context.Context) ([]LV, error) {
	lvs, err := t.allLVs(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(lvs, func(lv LV) bool { return Owner(lv) == "" }), nil
}

// ByUUID reads the LV of VG vg with that UUID, or found is false: one
// lvs of every VG (a VG that is gone is no error, as with VGs), not a
// vgs and an lvs; it is read at every resync's drift check of each LV.
func (t Tool) ByUUID(ctx context.Context, vg, uuid string) (lv LV, found bool, err error) {
	lvs, err := t.allLVs(ctx)
	if err != nil {
		return LV{}, false, err
	}
	i := slices.IndexFunc(lvs, func(lv LV) bool { return lv.VG == vg && lv.UUID == uuid })
	if i < 0 {
		return LV{}, false, nil
	}
	return lvs[i], true, nil
}

func (t Tool) allLVs(ctx context.Context) ([]LV, error) {
	out, err := t.run(ctx, "list the LVs of every volume group", AllLVsArgs())
	if err != nil {
		return nil, err
	}
	return ParseLVs(out)
}

func indexVG(vgs []VG, name string) int {
	return slices.IndexFunc(vgs, func(v VG) bool { return v.Name == name })
}

// Deactivate deactivates lv, unless it is open (ErrBusy): lvm2 would
// refuse too, but with words that do not say it is in use.
func (t Tool) Deactivate(ctx context.Context, lv LV) error {
	if lv.Open {
		return fmt.Errorf("deactivate LV %s: %w (mounted or held outside volumed)", lv.Ref(), ErrBusy)
	}
	_, err := t.run(ctx, "deactivate LV "+lv.Ref(), ActivateArgs(lv, false))
	return err
}

// Node is the device node of an active LV: /dev/<kernel name> (dm-N),
// which devtmpfs makes without udev.
func Node(sysRoot string, lv LV) (string, error) {
	if !lv.Active {
		return "", fmt.Errorf("LV %s is not active: it has no device", lv.Ref())
	}
	dir := sysfs.NumberDir(sysRoot, uint32(lv.Major), uint32(lv.Minor))
	p, err := os.Readlink(dir)
	if err != nil {
		return "", fmt.Errorf("device of LV %s (%d:%d): %w", lv.Ref(), lv.Major, lv.Minor, err)
	}
	return "/dev/" + p[strings.LastIndexByte(p, '/')+1:], nil
}
