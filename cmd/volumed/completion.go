package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/cli"
)

// completeVolumesCommand is the hidden command the completion scripts run
// to list the volumes the running agent knows.
const completeVolumesCommand = "__complete-volumes"

// cmdCompleteVolumes prints one volume name a line, and nothing when the
// agent does not answer: a completion must never print an error into the
// line being typed.
func cmdCompleteVolumes(ctx context.Context, args []string, stdout io.Writer) int {
	socket := defaultSocket
	if len(args) == 2 && args[0] == "--socket" {
		socket = args[1]
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := api.NewClient(socket).Status(ctx)
	if err != nil {
		return 0
	}
	for _, v := range st.Volumes {
		fmt.Fprintln(stdout, v.Name)
	}
	return 0
}

func cmdCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: volumed completion bash|zsh")
		return 2
	}
	var script string
	switch args[0] {
	case "bash":
		script = bashCompletion(cli.Commands())
	case "zsh":
		script = zshCompletion(cli.Commands())
	default:
		fmt.Fprintf(stderr, "volumed completion: no completion for shell %q (bash, zsh)\n", args[0])
		return 2
	}
	// Redirected into a file (make completion), a short write leaves a
	// broken script: say so.
	if _, err := io.WriteString(stdout, script); err != nil {
		fmt.Fprintf(stderr, "volumed completion: %v\n", err)
		return 1
	}
	return 0
}

func takesPath(f cli.Flag) bool {
	switch f.Arg {
	case "PATH", "DIR", "FILE":
		return true
	}
	return false
}

// dashed is how a flag is offered: -o, --socket.
func dashed(f cli.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

func commandNames(cmds []cli.Command) string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name
	}
	return strings.Join(names, " ")
}

// bashCompletion: flags are offered with two dashes (the flag package takes
// one or two); a flag's value completes to its words, or to files.
func bashCompletion(cmds []cli.Command) string {
	var b strings.Builder
	b.WriteString(`# bash completion for volumed; made by: volumed completion bash
_volumed() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "` + commandNames(cmds) + `" -- "$cur"))
        return
    fi
    local cmd=${COMP_WORDS[1]} socket=() i
    for ((i = 2; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        --socket | -socket) socket=(--socket "${COMP_WORDS[i + 1]}") ;;
        --socket=* | -socket=*) socket=(--socket "${COMP_WORDS[i]#*=}") ;;
        esac
    done
    local flags="" operands=""
    case $cmd in
`)
	for _, c := range cmds {
		var flags []string
		for _, f := range c.Flags {
			flags = append(flags, dashed(f))
		}
		fmt.Fprintf(&b, "    %s)\n", c.Name)
		var values []string
		var paths, others []string
		for _, f := range c.Flags {
			switch {
			case len(f.Values) > 0:
				values = append(values, fmt.Sprintf("        --%s | -%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", f.Name, f.Name, strings.Join(f.Values, " ")))
			case takesPath(f):
				paths = append(paths, "--"+f.Name+" | -"+f.Name)
			case f.Arg != "":
				others = append(others, "--"+f.Name+" | -"+f.Name)
			}
		}
		if len(values)+len(paths)+len(others) > 0 {
			b.WriteString("        case $prev in\n")
			for _, v := range values {
				b.WriteString(v)
			}
			if len(paths) > 0 {
				fmt.Fprintf(&b, "        %s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n", strings.Join(paths, " | "))
			}
			if len(others) > 0 {
				fmt.Fprintf(&b, "        %s) return ;;\n", strings.Join(others, " | "))
			}
			b.WriteString("        esac\n")
		}
		fmt.Fprintf(&b, "        flags=%q operands=%q ;;\n", strings.Join(flags, " "), c.Operands)
	}
	b.WriteString(`    *) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return
    fi
    case $operands in
    volumes) COMPREPLY=($(compgen -W "$(volumed ` + completeVolumesCommand + ` "${socket[@]}" 2>/dev/null)" -- "$cur")) ;;
    files) COMPREPLY=($(compgen -f -- "$cur")) ;;
    shells) COMPREPLY=($(compgen -W "` + strings.Join(cli.Shells(), " ") + `" -- "$cur")) ;;
    esac
}
complete -F _volumed volumed
`)
	return b.String()
}

// zshQuote makes s safe inside an _arguments spec in single quotes.
func zshQuote(s string) string {
	r := strings.NewReplacer("'", `'\''`, "[", `\[`, "]", `\]`, ":", `\:`)
	return r.Replace(s)
}

func zshCompletion(cmds []cli.Command) string {
	var b strings.Builder
	b.WriteString(`#compdef volumed
# zsh completion for volumed; made by: volumed completion zsh

_volumed_volumes() {
    local -a vols socket
    [[ -n ${opt_args[--socket]} ]] && socket=(--socket ${opt_args[--socket]})
    vols=(${(f)"$(_call_program volumes volumed ` + completeVolumesCommand + ` $socket 2>/dev/null)"})
    _describe -t volumes volume vols
}

_volumed() {
    local -a commands
    commands=(
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "        '%s:%s'\n", c.Name, zshQuote(c.Short))
	}
	b.WriteString(`    )
    if (( CURRENT == 2 )); then
        _describe -t commands command commands
        return
    fi
    local cmd=$words[2]
    shift words
    (( CURRENT-- ))
    case $cmd in
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "    %s)\n        _arguments -s", c.Name)
		for _, f := range c.Flags {
			action := ""
			switch {
			case len(f.Values) > 0:
				action = fmt.Sprintf(":%s:(%s)", strings.ToLower(f.Arg), strings.Join(f.Values, " "))
			case takesPath(f):
				action = fmt.Sprintf(":%s:_files", strings.ToLower(f.Arg))
			case f.Arg != "":
				action = fmt.Sprintf(":%s: ", strings.ToLower(f.Arg))
			}
			repeat := ""
			if f.Name == "config-dir" {
				repeat = "*"
			}
			fmt.Fprintf(&b, " \\\n            '%s%s[%s]%s'", repeat, dashed(f), zshQuote(f.Usage), action)
		}
		switch c.Operands {
		case "volumes":
			b.WriteString(" \\\n            '*:volume:_volumed_volumes'")
		case "files":
			b.WriteString(" \\\n            '*:manifest:_files'")
		case "shells":
			fmt.Fprintf(&b, " \\\n            '1:shell:(%s)'", strings.Join(cli.Shells(), " "))
		}
		b.WriteString("\n        ;;\n")
	}
	b.WriteString(`    esac
}

# Autoloaded from a completion directory, the file is the function's body;
# sourced (source <(volumed completion zsh)), it registers the function.
if [[ $funcstack[1] == _volumed ]]; then
    _volumed "$@"
else
    compdef _volumed volumed
fi
`)
	return b.String()
}
