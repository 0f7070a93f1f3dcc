package main

import (
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/cli"
)

// The usage names every command and flag of internal/cli (which a test
// holds to the flags each command parses), within the width, with no
// trailing blanks.
func TestUsageNamesEveryFlag(t *testing.T) {
	u := usageText()
	for i, line := range strings.Split(u, "\n") {
		if len(line) > usageWidth {
			t.Errorf("line %d is %d columns: %q", i+1, len(line), line)
		}
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d ends in blanks: %q", i+1, line)
		}
	}
	for _, c := range cli.Commands() {
		if !strings.Contains(u, "volumed "+c.Name+" ") && !strings.Contains(u, "volumed "+c.Name+"\n") {
			t.Errorf("usage lacks command %s", c.Name)
		}
		for _, f := range c.Flags {
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			if !strings.Contains(u, "["+dash+f.Name) {
				t.Errorf("usage lacks %s's flag %s%s", c.Name, dash, f.Name)
			}
		}
	}
}
