// Package size is volumed's one table of size units: the suffixes a
// manifest writes after a number of bytes ("64Mi", "1G"), the constants
// a disk selector multiplies by ("100 * GiB") and the JSON Schema
// pattern of a size are all made from it.
package size

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A Unit is one suffix and the bytes it stands for.
type Unit struct {
	Suffix string
	Bytes  int64
	// Binary: a power of 1024, which a disk selector names with a B
	// ("GiB").
	Binary bool
	// Alias: accepted, but not offered in a message ("K" for "k").
	Alias bool
}

// Units lists every suffix, decimal ones first.
func Units() []Unit {
	return []Unit{
		{Suffix: "k", Bytes: 1e3},
		{Suffix: "K", Bytes: 1e3, Alias: true},
		{Suffix: "M", Bytes: 1e6},
		{Suffix: "G", Bytes: 1e9},
		{Suffix: "T", Bytes: 1e12},
		{Suffix: "P", Bytes: 1e15},
		{Suffix: "Ki", Bytes: 1 << 10, Binary: true},
		{Suffix: "Mi", Bytes: 1 << 20, Binary: true},
		{Suffix: "Gi", Bytes: 1 << 30, Binary: true},
		{Suffix: "Ti", Bytes: 1 << 40, Binary: true},
		{Suffix: "Pi", Bytes: 1 << 50, Binary: true},
	}
}

// Parse parses a size as written in a manifest: a whole number of bytes
// with an optional suffix from Units, e.g. "64Mi", "10Gi", "1G",
// "1048576".
func Parse(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	unit, ok := int64(1), s[i:] == ""
	for _, u := range Units() {
		if u.Suffix == s[i:] {
			unit, ok = u.Bytes, true
		}
	}
	if i == 0 || !ok {
		return 0, fmt.Errorf("invalid size %q: want a whole number with an optional suffix %s", s, offered())
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * unit, nil
}

// offered lists the suffixes a message offers, binary ones first:
// "Ki, Mi, Gi, Ti, Pi, k, M, G, T or P".
func offered() string {
	var bin, dec []string
	for _, u := range Units() {
		switch {
		case u.Alias:
		case u.Binary:
			bin = append(bin, u.Suffix)
		default:
			dec = append(dec, u.Suffix)
		}
	}
	all := append(bin, dec...)
	return strings.Join(all[:len(all)-1], ", ") + " or " + all[len(all)-1]
}

// Pattern is the JSON Schema pattern of a size more than 0 that Parse
// takes (whether it fits an int64 is left to Parse).
func Pattern() string {
	var sfx []string
	for _, u := range Units() {
		sfx = append(sfx, u.Suffix)
	}
	return `^0*[1-9][0-9]*(` + strings.Join(sfx, "|") + `)?$`
}

// Constants are the binary units as a disk selector names them
// ("KiB" → 1024).
func Constants() map[string]int64 {
	out := map[string]int64{}
	for _, u := range Units() {
		if u.Binary {
			out[u.Suffix+"B"] = u.Bytes
		}
	}
	return out
}

// Format writes n as a manifest would: in the largest binary unit that
// divides it exactly ("300Mi", "104Ki"), else in bytes.
func Format(n int64) string {
	us := Units()
	for i := len(us) - 1; i >= 0; i-- {
		if u := us[i]; u.Binary && n != 0 && n%u.Bytes == 0 {
			return strconv.FormatInt(n/u.Bytes, 10) + u.Suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
