package main

import (
	"strings"

	"github.com/volumed/volumed/internal/cli"
)

// usageWidth is where a synopsis line wraps.
const usageWidth = 100

// usageText is the usage volumed prints, made from internal/cli like the
// man page and the completions, so all three name the same flags.
func usageText() string {
	cmds := cli.Commands()
	pad := 0
	for _, c := range cmds {
		pad = max(pad, len(c.Name))
	}
	var b strings.Builder
	b.WriteString("volumed keeps this host's volumes attached, formatted and mounted as its manifests say.\n\nUsage:\n")
	for _, c := range cmds {
		head := "  volumed " + c.Name + strings.Repeat(" ", pad-len(c.Name))
		indent := strings.Repeat(" ", len(head)+1)
		words := synopsis(c)
		line := head
		for _, w := range words {
			if len(line)+1+len(w) > usageWidth && line != head {
				b.WriteString(line + "\n")
				line = indent[:len(indent)-1]
			}
			line += " " + w
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		b.WriteString(indent + c.Short + "\n")
	}
	b.WriteString("\nSee volumed(8) and volumed.yaml(5).\n")
	return b.String()
}

// synopsis lists a command's operands and flags as usage words.
func synopsis(c cli.Command) []string {
	var out []string
	if c.Args != "" {
		out = append(out, c.Args)
	}
	for _, f := range c.Flags {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		w := dash + f.Name
		switch {
		case len(f.Values) > 0:
			w += " " + strings.Join(f.Values, "|")
		case f.Arg != "":
			w += " " + f.Arg
		}
		out = append(out, "["+w+"]")
	}
	return out
}
