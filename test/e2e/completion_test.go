package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/testtool"
)

// unattachable writes a loop volume whose image does not exist and is not
// to be created: the agent knows it but can never attach it.
func (e *env) unattachable(name string) {
	e.write(name+".yaml", fmt.Sprintf("apiVersion: volumed/v1\nkind: Volume\nmetadata:\n  name: %s\nspec:\n  source:\n    loop:\n      file: %s\n  filesystem:\n    type: ext4\n  mounts:\n    - path: %s\n",
		name, filepath.Join(e.images, name+"-absent.img"), e.target(name)))
}

// complete runs bash with `volumed completion bash` loaded, as a user's
// shell would have it, and returns what completing words offers.
func complete(t *testing.T, words ...string) []string {
	t.Helper()
	bash := testtool.Need(t, "bash", "bash")[0]
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, "'"+w+"'")
	}
	script := `source <(volumed completion bash) || exit 1
complete -p volumed || exit 1
COMP_WORDS=(` + strings.Join(quoted, " ") + `)
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_volumed
printf 'reply:%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command(bash, "--norc", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(volumedBin)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != "complete -F _volumed volumed" {
		t.Fatalf("complete -p volumed says %q, want the completion registered", lines[0])
	}
	var reply []string
	for _, l := range lines[1:] {
		if r, ok := strings.CutPrefix(l, "reply:"); ok && r != "" {
			reply = append(reply, r)
		} else if !ok {
			t.Fatalf("completing %q printed %q", words, l)
		}
	}
	return reply
}

func TestBashCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.unattachable("alpha")
	e.unattachable("beta")
	e.start()
	e.waitFor("both volumes known", func(st *api.Status) bool { return len(st.Volumes) == 2 })

	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"volumed", "st"}, "status"},
		{[]string{"volumed", ""}, "run status validate wait shutdown disks wipe recovery-key completion version help"},
		{[]string{"volumed", "recovery-key", "--socket", e.socket, "a"}, "alpha"},
		{[]string{"volumed", "wait", "--"}, "--timeout --fail-missing --socket"},
		{[]string{"volumed", "status", "-o", ""}, "table json"},
		{[]string{"volumed", "completion", ""}, "bash zsh"},
		{[]string{"volumed", "status", "--socket", e.socket, ""}, "alpha beta"},
		{[]string{"volumed", "wait", "--socket", e.socket, "--timeout", "1m", "b"}, "beta"},
		// No agent on that socket: nothing offered, and nothing printed.
		{[]string{"volumed", "status", "--socket", filepath.Join(e.dir, "absent.sock"), ""}, ""},
	} {
		if got := strings.Join(complete(t, c.words...), " "); got != c.want {
			t.Errorf("completing %q offers %q, want %q", c.words, got, c.want)
		}
	}

	// zsh's completion system needs a terminal to drive; its helpers are
	// stubbed here to print what they are offered, and the script's own
	// functions run as zsh would call them.
	t.Run("zsh", func(t *testing.T) {
		zsh := testtool.Need(t, "Debian: zsh", "zsh")[0]
		script := `compdef() { : }
_describe() { shift 2; print -rl -- ${(P)2} }
_call_program() { shift; "$@" }
source <(volumed completion zsh) || exit 1
typeset -A opt_args
opt_args=(--socket ` + e.socket + `)
print -r -- volumes: $(_volumed_volumes)
words=(volumed '') CURRENT=2
print -r -- commands: $(_volumed | cut -d: -f1)
opt_args=(--socket ` + filepath.Join(e.dir, "absent.sock") + `)
print -r -- none: $(_volumed_volumes 2>&1)`
		cmd := exec.Command(zsh, "-f", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(volumedBin)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		want := "volumes: alpha beta\ncommands: run status validate wait shutdown disks wipe recovery-key completion version help\nnone:\n"
		if err != nil || string(out) != want {
			t.Fatalf("zsh completion: %v; printed:\n%s\nwant:\n%s", err, out, want)
		}
	})
}

// TestZshCompletionLoads: zsh parses the script and, sourced after
// compinit, registers it for volumed.
func TestZshCompletionLoads(t *testing.T) {
	t.Parallel()
	zsh := testtool.Need(t, "Debian: zsh", "zsh")[0]
	cmd := exec.Command(zsh, "-f", "-c", `autoload -U compinit && compinit -u -D && source <(volumed completion zsh) && print -r -- $_comps[volumed]`)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(volumedBin)+":"+os.Getenv("PATH"), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_volumed" {
		t.Fatalf("zsh with the completion sourced: %v; $_comps[volumed] is %q, want _volumed", err, out)
	}
}
