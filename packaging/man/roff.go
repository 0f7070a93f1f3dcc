package main

import (
	"fmt"
	"strings"
)

// esc makes text safe in roff: backslashes and hyphens (a plain - is a
// hyphen to groff, and flags and paths want the minus sign), characters
// beyond ASCII, and a line that would start with a control character.
func esc(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	var b strings.Builder
	for i, line := range strings.Split(s, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			b.WriteString(`\&`)
		}
		for _, r := range line {
			if r > 0x7e {
				// groff reads its input as Latin-1 unless told; a named
				// Unicode glyph renders everywhere.
				fmt.Fprintf(&b, `\[u%04X]`, r)
				continue
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

func bold(s string) string   { return `\fB` + esc(s) + `\fR` }
func italic(s string) string { return `\fI` + esc(s) + `\fR` }

// page collects roff lines.
type page struct{ b strings.Builder }

func (p *page) line(parts ...string) {
	p.b.WriteString(strings.Join(parts, ""))
	p.b.WriteByte('\n')
}

func (p *page) section(name string) { p.line(".SH ", strings.ToUpper(name)) }
func (p *page) para(text string)    { p.line(".PP"); p.line(esc(text)) }

// tagged is an indented paragraph under a tag (.TP).
func (p *page) tagged(tag, text string) {
	p.line(".TP")
	p.line(tag)
	if text != "" {
		p.line(esc(text))
	}
}

// literal is a block shown as typed (.EX/.EE, no filling).
func (p *page) literal(text string) {
	p.line(".PP")
	p.line(".RS 4")
	p.line(".EX")
	p.line(esc(strings.TrimRight(text, "\n")))
	p.line(".EE")
	p.line(".RE")
}

func (p *page) bytes() []byte { return []byte(p.b.String()) }
