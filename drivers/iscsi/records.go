// Parsing iscsiadm's record text format.

package iscsi

import "strings"

// parseRecords parses iscsiadm's record format (node records, -o show
// output, iface records): records between "# BEGIN RECORD" and "# END
// RECORD" lines, "name = value" lines within, "<empty>" for unset values;
// a later line for the same name wins, as in iscsiadm.
func parseRecords(out []byte) []map[string]string {
	var recs []map[string]string
	var cur map[string]string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, beginRecord):
			cur = make(map[string]string)
			recs = append(recs, cur)
			continue
		case strings.HasPrefix(line, endRecord):
			cur = nil
			continue
		}
		if cur == nil {
			continue
		}
		if k, v, ok := recordLine(line); ok {
			if v == emptyValue {
				v = ""
			}
			cur[k] = v
		}
	}
	return recs
}

// recordLine splits a trimmed "name = value" line as iscsiadm's
// idbm_recinfo_config does: the name ends at white space or '=', then '='
// with optional white space around it; comments and lines without a value
// are not settings.
func recordLine(line string) (key, value string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", false
	}
	i := strings.IndexFunc(line, func(r rune) bool { return r == '=' || isSpace(r) })
	if i <= 0 {
		return "", "", false
	}
	key, rest := line[:i], strings.TrimLeftFunc(line[i:], isSpace)
	if !strings.HasPrefix(rest, "=") {
		return "", "", false
	}
	value = strings.TrimLeftFunc(rest[1:], isSpace)
	if value == "" {
		return "", "", false
	}
	return key, value, true
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\v' || r == '\f' || r == '\r'
}
