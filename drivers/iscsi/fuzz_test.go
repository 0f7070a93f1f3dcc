package iscsi

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzSysfsNames feeds the sysfs name and attribute parsers arbitrary
// text: they must never panic, and what they accept must read back the
// same once printed. Seeds: testdata/fuzz/FuzzSysfsNames.
func FuzzSysfsNames(f *testing.F) {
	for _, s := range []string{"2:0:0:0", "target2:0:0", "session1", "connection1:0", "8:16", "127.0.0.1,3260,-1", "(null)\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, ok := parseHCTL(s); ok {
			if again, ok := parseHCTL(h.String()); !ok || again != h {
				t.Fatalf("parseHCTL(%q) = %+v, which reads back as %+v, %v", s, h, again, ok)
			}
		}
		if n, ok := parseIndexed(s, "session"); ok {
			if again, ok := parseIndexed(fmt.Sprint("session", n), "session"); !ok || again != n || n < 0 {
				t.Fatalf("parseIndexed(%q) = %d", s, n)
			}
		}
		if sid, cid, ok := parseConnName(s); ok {
			if a, b, ok := parseConnName(fmt.Sprintf("connection%d:%d", sid, cid)); !ok || a != sid || b != cid {
				t.Fatalf("parseConnName(%q) = %d, %d", s, sid, cid)
			}
		}
		if h, c, tg, ok := parseTargetDir(s); ok {
			if h2, c2, t2, ok := parseTargetDir(fmt.Sprintf("target%d:%d:%d", h, c, tg)); !ok || h2 != h || c2 != c || t2 != tg {
				t.Fatalf("parseTargetDir(%q) = %d:%d:%d", s, h, c, tg)
			}
		}
		if ma, mi, ok := parseDevNum(s); ok {
			if a, b, ok := parseDevNum(fmt.Sprintf("%d:%d", ma, mi)); !ok || a != ma || b != mi {
				t.Fatalf("parseDevNum(%q) = %d:%d", s, ma, mi)
			}
		}
		if addr, port, _, ok := parsePortalDir(s); ok && (!addr.IsValid() || port == 0) {
			t.Fatalf("parsePortalDir(%q) = %v, %d", s, addr, port)
		}
		if v := cleanAttr(s); v != strings.TrimSpace(v) || v == "(null)" {
			t.Fatalf("cleanAttr(%q) = %q", s, v)
		}
	})
}

// FuzzRecord patches credentials into arbitrary node records: the result
// must carry exactly the credentials asked for, keep every other setting
// of the record, and parsing must never panic. Seeds:
// testdata/fuzz/FuzzRecord.
func FuzzRecord(f *testing.F) {
	f.Add("# BEGIN RECORD 2.1.8\nnode.name = iqn.x\nnode.session.auth.password = old\n# END RECORD\n", "alice", "Chap-s3cret-one")
	f.Add("# BEGIN RECORD 2.1.8\nnode.name = iqn.x", "u", "p")
	f.Fuzz(func(t *testing.T, rec, user, pass string) {
		orig := parseRecords([]byte(rec))
		if checkValue("user", user) != nil || checkValue("pass", pass) != nil {
			return
		}
		want := credentials{method: "CHAP", username: user, password: pass}.values()
		out, err := patchRecord([]byte(rec), want)
		begins := 0
		for line := range strings.Lines(rec) {
			if strings.HasPrefix(strings.TrimSpace(line), beginRecord) {
				begins++
			}
		}
		if begins != 1 {
			if err == nil {
				t.Fatalf("patched a file with %d records", begins)
			}
			return
		}
		if err != nil {
			t.Fatalf("patchRecord: %v", err)
		}
		got := parseRecords(out)
		if len(got) != 1 || len(orig) != 1 {
			t.Fatalf("%d records after patching, %d before", len(got), len(orig))
		}
		for _, k := range authKeys {
			if got[0][k] != want[k] {
				t.Fatalf("%s = %q after patching, want %q", k, got[0][k], want[k])
			}
		}
		for k, v := range orig[0] {
			if _, managed := want[k]; !managed && got[0][k] != v {
				t.Fatalf("%s changed from %q to %q", k, v, got[0][k])
			}
		}
	})
}
