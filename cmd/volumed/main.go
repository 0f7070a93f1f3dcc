// Command volumed keeps a host's volumes attached, formatted and mounted
// as the manifests in its drop-in directories say.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/volumed/volumed/kinds"
	"github.com/volumed/volumed/kinds/kind"
)

// version is stamped by the Makefile (-ldflags -X main.version=...).
var version = "dev"

const defaultSocket = "/run/volumed/volumed.sock"

// The kernel hands a signal sent to the process (systemd's SIGTERM) to its
// first thread when that thread can take it, even while it sleeps
// uninterruptibly in a write to a frozen or hung state filesystem; the
// signal then waits for the write. So the first thread belongs to main
// alone, which does nothing but wait: every write happens on another.
func init() { runtime.LockOSThread() }

func main() {
	code := make(chan int, 1)
	go func() { code <- run(context.Background(), os.Args[1:], os.Stdout, os.Stderr) }()
	os.Exit(<-code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "run":
		err = cmdRun(ctx, rest, stderr)
	case "status":
		err = cmdStatus(ctx, rest, stdout)
	case "validate":
		return cmdValidate(rest, stdout, stderr)
	case "wait":
		err = cmdWait(ctx, rest, stderr)
	case "shutdown":
		err = cmdShutdown(ctx, rest, stdout)
	case "disks":
		err = cmdDisks(ctx, rest, stdout)
	case "wipe":
		err = cmdWipe(ctx, rest, stdout)
	case "recovery-key":
		err = cmdRecoveryKey(ctx, rest, stdout)
	case "version", "--version":
		fmt.Fprintf(stdout, "volumed %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		fmt.Fprintf(stdout, "sources: %s\n", describeKinds(kinds.All()))
	case "completion":
		return cmdCompletion(rest, stdout, stderr)
	case completeVolumesCommand:
		return cmdCompleteVolumes(ctx, rest, stdout)
	case checkStateCommand:
		return cmdCheckState(rest, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText())
	default:
		fmt.Fprintf(stderr, "volumed: unknown command %q\n\n%s", cmd, usageText())
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(stderr, ee.msg)
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "volumed:", err)
		return 1
	}
	return 0
}

// exitError carries an exit code (and an optional message) up to main.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// parseInterspersed lets flags and names mix (`status data -o json`),
// which the flag package alone does not.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return names, nil
		}
		names = append(names, rest[0])
		args = rest[1:]
	}
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// describeKinds lists the source kinds of this build and the host tools
// each needs, e.g. "loop, iscsi (needs iscsiadm), ...".
func describeKinds(ks []kind.Kind) string {
	var out []string
	for _, k := range ks {
		s := k.Name()
		var tools []string
		for _, p := range k.Needs(k.New()).Programs {
			tools = append(tools, p.Name)
		}
		if len(tools) > 0 {
			s += " (needs " + strings.Join(tools, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}
