package size

import (
	"maps"
	"regexp"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const want = `want a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, k, M, G, T or P`
	tests := []struct {
		in  string
		n   int64
		err string
	}{
		{"1048576", 1 << 20, ""},
		{"64Mi", 64 << 20, ""},
		{"10Gi", 10 << 30, ""},
		{"1G", 1e9, ""},
		{"2k", 2000, ""},
		{"2K", 2000, ""},
		{"3Pi", 3 << 50, ""},
		{"0", 0, ""},
		{"007Ki", 7 << 10, ""},
		{"8191Pi", 8191 << 50, ""},
		{"8192Pi", 0, `invalid size "8192Pi": too large`},
		{"99999999999999999999", 0, "too large"},
		{"10GB", 0, `invalid size "10GB": ` + want},
		{"Gi", 0, `invalid size "Gi": ` + want},
		{"", 0, `invalid size "": ` + want},
		{"-1", 0, want},
		{"1.5Gi", 0, want},
		{"1 Gi", 0, want},
		{"1gi", 0, want},
		{"1Ti", 1 << 40, ""},
		{"512M", 512e6, ""},
		{"1P", 1e15, ""},
		{"-1Mi", 0, want},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"9223372036854775808", 0, "too large"},
		{"8388608Ti", 0, "too large"},
	}
	for _, tt := range tests {
		n, err := Parse(tt.in)
		if tt.err == "" {
			if err != nil || n != tt.n {
				t.Errorf("Parse(%q) = %d, %v; want %d", tt.in, n, err, tt.n)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Parse(%q) = %d, %v; want an error with %q", tt.in, n, err, tt.err)
		}
	}
}

// The schema's pattern takes what Parse takes and is more than 0.
func TestPatternAgreesWithParse(t *testing.T) {
	re := regexp.MustCompile(Pattern())
	for _, in := range []string{"1", "64Mi", "10Gi", "1G", "2k", "2K", "3Pi", "007Ki", "0", "00", "10GB", "Gi", "", "-1", "1.5Gi", "1gi"} {
		n, err := Parse(in)
		if want := err == nil && n > 0; re.MatchString(in) != want {
			t.Errorf("pattern matches %q: %v; Parse says %d, %v", in, re.MatchString(in), n, err)
		}
	}
}

func TestConstants(t *testing.T) {
	want := map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
	if got := Constants(); !maps.Equal(got, want) {
		t.Errorf("Constants = %v, want %v", got, want)
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{300 << 20, "300Mi"},
		{104 << 10, "104Ki"},
		{1 << 40, "1Ti"},
		{3 << 50, "3Pi"},
		{1536 << 20, "1536Mi"},
		{1000, "1000"},
		{0, "0"},
		{-2048, "-2Ki"},
	}
	for _, tt := range tests {
		got := Format(tt.n)
		if got != tt.want {
			t.Errorf("Format(%d) = %q, want %q", tt.n, got, tt.want)
		}
		if n, err := Parse(got); tt.n >= 0 && (err != nil || n != tt.n) {
			t.Errorf("Parse(Format(%d)) = %d, %v", tt.n, n, err)
		}
	}
}
