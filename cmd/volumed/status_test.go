package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// status NAME of an encrypted volume says whether it is open, as what
// and by which kind of key, or that it is locked.
func TestDescribeEncryption(t *testing.T) {
	for _, c := range []struct {
		e    *api.Encryption
		want string
	}{
		{&api.Encryption{State: "open", Mapping: "/dev/mapper/volumed-v", UUID: "5b7e2c1a", KeyKind: "tpm2"},
			"Encrypted: LUKS2 5b7e2c1a, open as /dev/mapper/volumed-v (opened by its tpm2 key)\n"},
		{&api.Encryption{State: "open", Mapping: "/dev/mapper/volumed-v", UUID: "5b7e2c1a"},
			"Encrypted: LUKS2 5b7e2c1a, open as /dev/mapper/volumed-v (found open at start-up)\n"},
		{&api.Encryption{State: "locked"}, "Encrypted: LUKS2, locked: no key opens it (see the Locked condition)\n"},
		{nil, ""},
	} {
		var b bytes.Buffer
		describe(&b, api.Volume{Name: "v", Encryption: c.e})
		got := ""
		for _, l := range strings.SplitAfter(b.String(), "\n") {
			if strings.HasPrefix(l, "Encrypted:") {
				got = l
			}
		}
		if got != c.want {
			t.Errorf("%+v: line %q, want %q", c.e, got, c.want)
		}
	}
}
