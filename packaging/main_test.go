package packaging_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

// TestMain runs the tests in a private mount namespace: the sandbox proof
// mounts, and the maintainer script tests put a tmpfs over /run. A child
// started by TestSandboxedMountsDoNotReachTheHost does its one job instead.
func TestMain(m *testing.M) {
	if target := os.Getenv(mountChildEnv); target != "" {
		if err := mountChild(target, os.Getenv(reshareEnv) == "1"); err != nil {
			fmt.Fprintln(os.Stderr, "mount child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testns.Main(m)
}

// needTool returns the path of a program the test cannot do without, or
// skips; under make test or CI a missing tool fails instead (scripts/deps.sh
// installs them).
func needTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	return testtool.Need(t, "Debian: "+debianPackage, name)[0]
}

// makeBuild runs the command `make build` runs, writing to out instead of
// bin/volumed: the binary checked is the one the Makefile makes, and the
// working tree is left alone.
func makeBuild(t *testing.T, out string) {
	t.Helper()
	line, err := exec.Command("make", "-s", "-n", "-C", "..", "build").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	words, err := shellWords(strings.TrimSpace(string(line)))
	if err != nil {
		t.Fatalf("make build runs %q: %v", line, err)
	}
	var env []string
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		env = append(env, words[0])
		words = words[1:]
	}
	replaced := false
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "-o" && words[i+1] == "bin/volumed" {
			words[i+1] = out
			replaced = true
		}
	}
	if len(words) == 0 || !replaced {
		t.Fatalf("make build runs %q: want one command with -o bin/volumed", line)
	}
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
}

// shellWords splits one simple shell command: words, single and double
// quotes, backslashes. Anything that would need a shell to mean what it
// says (expansions, redirections, several commands) is an error.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated '")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if strings.IndexByte("$`", s[i]) >= 0 {
					return nil, fmt.Errorf("expansion %q inside double quotes", s[i])
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\`, s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, errors.New(`unterminated "`)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case strings.IndexByte("$`;|&<>()\n*?[", c) >= 0, !inWord && (c == '#' || c == '~'):
			return nil, fmt.Errorf("%q needs a shell", c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`CGO_ENABLED=0 go build -ldflags '-s -w -X main.version=v1-2' -o "bin/vol umed" a\ b`)
	want := []string{"CGO_ENABLED=0", "go", "build", "-ldflags", "-s -w -X main.version=v1-2", "-o", "bin/vol umed", "a b"}
	if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("shellWords = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"go build $(X)", "a; b", "a > b", "'open", `"open`, `"$HOME"`, "a && b"} {
		if w, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q) = %q, want an error", bad, w)
		}
	}
}

// unit is a parsed systemd unit file: section → key → values in order.
type unit map[string]map[string][]string

func loadUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: not a key=value line of a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// words is every word of every value of key, as systemd joins list settings.
func (u unit) words(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

func (u unit) value(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// withRun puts an empty tmpfs over /run for the rest of the test (the
// test binary runs in its own mount namespace), with /run/systemd/system
// in it when running is set: that directory is how programs tell that
// systemd is PID 1.
func withRun(t *testing.T, running bool) {
	t.Helper()
	if !testns.Inside() {
		t.Fatal("withRun outside the private mount namespace")
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs on /run: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount("/run", unix.MNT_DETACH); err != nil {
			t.Errorf("unmount /run: %v", err)
		}
	})
	if running {
		if err := os.MkdirAll(filepath.Join("/run", "systemd", "system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
