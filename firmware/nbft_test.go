package firmware

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

var writeSeeds = flag.Bool("write-seeds", false, "regenerate testdata/fuzz/FuzzParseNBFT from the fixture builder")

func TestParseNBFTSample(t *testing.T) {
	b, _ := sampleSpec().build()
	got, err := ParseNBFT(b)
	if err != nil {
		t.Fatalf("ParseNBFT: %v", err)
	}
	want := &NBFT{
		MajorRevision: 1,
		OEMID:         "VOLMD",
		OEMTableID:    "FIXTURE",
		Valid:         true,
		Host: NBFTHost{
			Valid:         true,
			ID:            [16]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01},
			NQN:           "nqn.2014-08.org.nvmexpress:uuid:11223344-5566-7788-99aa-bbccddeeff01",
			IDConfigured:  true,
			NQNConfigured: true,
			PrimaryAdmin:  PrimaryAdminSelected,
		},
		HFIs: []NBFTHFI{{
			Index:     1,
			Transport: "tcp",
			TCP: &NBFTHFITCP{
				PCISBDF:     0x0300,
				MAC:         "52:54:00:12:34:56",
				IP:          "192.168.49.10",
				PrefixLen:   24,
				Gateway:     "192.168.49.1",
				RouteMetric: 500,
				PrimaryDNS:  "192.168.49.1",
				GlobalRoute: true,
				HostName:    "edge-17",
			},
		}},
		Subsystems: []NBFTSubsystem{{
			Index:          1,
			Transport:      "tcp",
			Address:        "192.168.49.5",
			TrSvcID:        "4420",
			PortID:         1,
			NQN:            "nqn.2024-01.io.example:boot-root",
			NSID:           1,
			NID:            "uuid.deadbeef-0001-4002-8003-040506070809",
			HFIIndex:       1,
			DiscoveryIndex: 1,
			SecurityIndex:  1,
			Availability:   NamespaceAvailable,
			HeaderDigest:   true,
			ControllerID:   7,
			AdminQueueSize: 32,
			DHCPRootPath:   "nvme+tcp://192.168.49.5:4420/nqn.2024-01.io.example:boot-root/1",
		}},
		Security: []NBFTSecurity{{
			Index: 1, Flags: 0x000d, SecretType: 2, AuthProtocols: []byte{1},
			KeyPath: "https://bmc.example/redfish/v1/keys/1",
		}},
		Discovery: []NBFTDiscovery{{
			Index: 1, HFIIndex: 1, SecurityIndex: 1,
			URI: "nvme+tcp://192.168.49.5:8009/", NQN: "nqn.2014-08.org.nvmexpress.discovery",
		}},
	}
	// Empty and nil lists are the same to a reader.
	for i := range got.Security {
		for _, p := range []*[]byte{&got.Security[i].SecureChannelAlgorithms, &got.Security[i].CipherSuites, &got.Security[i].DHGroups, &got.Security[i].HashFunctions} {
			if len(*p) == 0 {
				*p = nil
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNBFT:\n got %+v\nwant %+v", dump(got), dump(want))
	}
}

func dump(t *NBFT) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%+v host=%+v", *t, t.Host)
	for _, h := range t.HFIs {
		fmt.Fprintf(&s, " hfi=%+v tcp=%+v", h, h.TCP)
	}
	for _, x := range t.Subsystems {
		fmt.Fprintf(&s, " ssns=%+v", x)
	}
	return s.String()
}

func TestParseNBFTVariants(t *testing.T) {
	t.Run("ipv6 address and lengths counting the NUL", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) {
			s.ssns[0].traddr = ipBytes("fd00::5")
			s.ssns[0].nulInLength = true
		})
		if a := got.Subsystems[0].Address; a != "fd00::5" {
			t.Errorf("address %q, want fd00::5", a)
		}
		if n := got.Subsystems[0].NQN; n != "nqn.2024-01.io.example:boot-root" {
			t.Errorf("NQN %q", n)
		}
	})
	t.Run("address as text", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) { s.ssns[0].traddr = []byte("10.1.2.3\x00") })
		if a := got.Subsystems[0].Address; a != "10.1.2.3" {
			t.Errorf("address %q, want 10.1.2.3", a)
		}
	})
	t.Run("NGUID and EUI-64", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) {
			s.ssns = append(s.ssns, s.ssns[0])
			s.ssns[0].nidt = 2
			s.ssns[1].nidt, s.ssns[1].index = 1, 2
		})
		if n := got.Subsystems[0].NID; n != "eui.deadbeef000140028003040506070809" {
			t.Errorf("NGUID rendered %q", n)
		}
		if n := got.Subsystems[1].NID; n != "eui.deadbeef00014002" {
			t.Errorf("EUI-64 rendered %q", n)
		}
	})
	t.Run("control not valid", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) { s.controlFlags = 0 })
		if got.Valid || len(got.Subsystems) != 0 || got.Host.NQN != "" {
			t.Errorf("a table without Block Valid gave %+v", dump(got))
		}
	})
	t.Run("invalid descriptors are skipped whatever they hold", func(t *testing.T) {
		s := sampleSpec()
		s.ssns = append(s.ssns, tSSNS{index: 2, flags: 0})
		s.hfis = append(s.hfis, tHFI{index: 2, flags: 0, trtype: 3})
		b, l := s.build()
		b[l.ssns+specSSNSLen] = 0xee // structure id of the invalid SSNS
		seal(b)
		got := mustParse(t, b)
		if len(got.Subsystems) != 1 || len(got.HFIs) != 1 {
			t.Errorf("got %d SSNS and %d HFIs, want the valid 1 and 1", len(got.Subsystems), len(got.HFIs))
		}
	})
	t.Run("later minor revision", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) { s.minor = 1 })
		if got.MinorRevision != 1 || len(got.Subsystems) != 1 {
			t.Errorf("minor revision 1 gave %+v", dump(got))
		}
	})
	t.Run("unknown transport is kept", func(t *testing.T) {
		got := parseSpec(t, func(s *nbftSpec) { s.ssns[0].trtype, s.hfis[0].trtype = 9, 9 })
		if got.Subsystems[0].Transport != "trtype 9" || got.HFIs[0].Transport != "trtype 9" || got.HFIs[0].TCP != nil {
			t.Errorf("got %+v", dump(got))
		}
	})
}

// buildSpec builds the sample table after edit (if any) changed it.
func buildSpec(edit func(s *nbftSpec)) []byte {
	s := sampleSpec()
	if edit != nil {
		edit(&s)
	}
	b, _ := s.build()
	return b
}

func parseSpec(t *testing.T, edit func(s *nbftSpec)) *NBFT {
	t.Helper()
	return mustParse(t, buildSpec(edit))
}

func mustParse(t *testing.T, b []byte) *NBFT {
	t.Helper()
	got, err := ParseNBFT(b)
	if err != nil {
		t.Fatalf("ParseNBFT: %v", err)
	}
	return got
}

// TestParseNBFTRejects: every lie about a length or an offset, and every
// broken header, is refused with ErrInvalidTable and a message naming
// what is wrong.
func TestParseNBFTRejects(t *testing.T) {
	type mutation func(b []byte, l nbftLayout) []byte
	ref := func(name string, off, n int) mutation {
		return func(b []byte, l nbftLayout) []byte {
			at, ok := l.refs[name]
			if !ok {
				panic("no heap reference " + name)
			}
			if off >= 0 {
				le.PutUint32(b[at:], uint32(off))
			}
			if n >= 0 {
				le.PutUint16(b[at+4:], uint16(n))
			}
			return b
		}
	}
	heapEnd := func(b []byte) int { return int(le.Uint32(b[36:]) + le.Uint32(b[40:])) }
	cases := []struct {
		name   string
		mutate mutation
		want   string
		raw    bool // do not reseal: the header itself is the lie
	}{
		{"empty", func(b []byte, _ nbftLayout) []byte { return nil }, "shorter than the 64-byte", true},
		{"header only, cut", func(b []byte, _ nbftLayout) []byte { return b[:40] }, "shorter than the 64-byte", true},
		{"truncated", func(b []byte, _ nbftLayout) []byte { return b[:len(b)-1] }, "header length", true},
		{"trailing bytes", func(b []byte, _ nbftLayout) []byte { return append(b, 0) }, "header length", true},
		{"bad checksum", func(b []byte, _ nbftLayout) []byte { b[100]++; return b }, "checksum", true},
		{"bad signature", func(b []byte, _ nbftLayout) []byte { copy(b, "NBFX"); return b }, "signature", false},
		{"ACPI iBFT signature", func(b []byte, _ nbftLayout) []byte { copy(b, "iBFT"); return b }, "signature", false},
		{"major revision 2", func(b []byte, _ nbftLayout) []byte { b[8] = 2; return b }, "major revision", false},
		{"heap past the end", func(b []byte, _ nbftLayout) []byte { le.PutUint32(b[40:], le.Uint32(b[40:])+1); return b }, "heap at offset", false},
		{"heap length wraps", func(b []byte, _ nbftLayout) []byte { le.PutUint32(b[40:], 0xffffffff); return b }, "heap at offset", false},
		{"heap over the header", func(b []byte, _ nbftLayout) []byte { le.PutUint32(b[36:], 10); return b }, "heap at offset", false},
		{"table too short for control", func(b []byte, _ nbftLayout) []byte {
			b = b[:specHeaderLen+20]
			le.PutUint32(b[36:], 0)
			le.PutUint32(b[40:], 0)
			return b
		}, "control descriptor at offset 64", false},
		{"control wrong structure id", func(b []byte, l nbftLayout) []byte { b[l.control] = 4; return b }, "control descriptor: structure id 4", false},
		{"control length short", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+4:], 20); return b }, "control descriptor: length 20", false},
		{"control length past the end", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+4:], 0xffff); return b }, "control descriptor at offset 64 length 65535", false},
		{"host offset past the end", func(b []byte, l nbftLayout) []byte { le.PutUint32(b[l.control+8:], uint32(len(b)-4)); return b }, "host descriptor at offset", false},
		{"host offset into header", func(b []byte, l nbftLayout) []byte { le.PutUint32(b[l.control+8:], 0); return b }, "host descriptor at offset 0", false},
		{"host offset wraps", func(b []byte, l nbftLayout) []byte { le.PutUint32(b[l.control+8:], 0xfffffff0); return b }, "host descriptor at offset", false},
		{"host length short", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+12:], 10); return b }, "host descriptor length 10", false},
		{"host wrong structure id", func(b []byte, l nbftLayout) []byte { b[l.host] = 3; return b }, "host descriptor: structure id 3", false},
		{"HFI list past the end", func(b []byte, l nbftLayout) []byte { b[l.control+23] = 200; return b }, "HFI descriptor list at offset", false},
		{"HFI list offset past the end", func(b []byte, l nbftLayout) []byte { le.PutUint32(b[l.control+16:], uint32(len(b))); return b }, "HFI descriptor list at offset", false},
		{"HFI stride short", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+20:], 8); return b }, "HFI descriptor length 8", false},
		{"HFI wrong structure id", func(b []byte, l nbftLayout) []byte { b[l.hfi] = 4; return b }, "HFI descriptor 0: structure id 4", false},
		{"SSNS list past the end", func(b []byte, l nbftLayout) []byte { b[l.control+31] = 255; return b }, "SSNS descriptor list at offset", false},
		{"SSNS stride short", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+28:], 65); return b }, "SSNS descriptor length 65", false},
		{"SSNS stride huge", func(b []byte, l nbftLayout) []byte { le.PutUint16(b[l.control+28:], 0xffff); return b }, "SSNS descriptor list at offset", false},
		{"security list past the end", func(b []byte, l nbftLayout) []byte { b[l.control+39] = 255; return b }, "security descriptor list", false},
		{"discovery list past the end", func(b []byte, l nbftLayout) []byte { le.PutUint32(b[l.control+40:], 0xffffffff); return b }, "discovery descriptor list", false},
		{"host NQN past the heap", ref("host nqn", -1, 0xffff), "host descriptor: host NQN: heap object", false},
		{"host NQN before the heap", func(b []byte, l nbftLayout) []byte { return ref("host nqn", l.host, -1)(b, l) }, "host NQN: heap object at offset", false},
		{"host NQN offset wraps", ref("host nqn", 0xffffffff, 4), "host NQN: heap object at offset 4294967295", false},
		{"SSNS NQN one byte past the heap", func(b []byte, l nbftLayout) []byte {
			return ref("ssns0 nqn", heapEnd(b)-3, 4)(b, l)
		}, "SSNS descriptor 0: subsystem NQN: heap object", false},
		{"SSNS address past the heap", ref("ssns0 traddr", -1, 0x1000), "transport address: heap object", false},
		{"SSNS address not an address", func(b []byte, l nbftLayout) []byte {
			return ref("ssns0 traddr", -1, 5)(b, l)
		}, "neither a 16-byte address nor an IP address", false},
		{"SSNS service id past the heap", ref("ssns0 trsvcid", 0x7fffffff, -1), "transport service id: heap object", false},
		{"SSNS secondary HFIs past the heap", ref("ssns0 secondary", -1, 0xfff0), "secondary HFI associations", false},
		{"SSNS extended info short", ref("ssns0 ext", -1, 10), "extended info: length 10", false},
		{"SSNS extended info past the heap", ref("ssns0 ext", 0xffffff00, -1), "extended info: heap object", false},
		{"SSNS wrong structure id", func(b []byte, l nbftLayout) []byte { b[l.ssns] = 5; return b }, "SSNS descriptor 0: structure id 5", false},
		{"HFI transport info short", ref("hfi0 trinfo", -1, 64), "TCP transport info: length 64", false},
		{"HFI transport info past the heap", ref("hfi0 trinfo", -1, 0x8000), "transport info: heap object", false},
		{"discovery URI past the heap", ref("disc0 uri", -1, 0x4000), "discovery descriptor 0: controller address", false},
		{"security keypath just past the heap", func(b []byte, l nbftLayout) []byte {
			return ref("sec0 keypath", heapEnd(b), 1)(b, l)
		}, "secret keypath", false},
		{"string not UTF-8", func(b []byte, l nbftLayout) []byte {
			at := int(le.Uint32(b[l.refs["ssns0 nqn"]:]))
			b[at] = 0xff
			return b
		}, "subsystem NQN: not UTF-8", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, l := sampleSpec().build()
			b = c.mutate(b, l)
			if !c.raw && len(b) >= 10 {
				seal(b)
			}
			got, err := ParseNBFT(b)
			if err == nil {
				t.Fatalf("accepted: %s", dump(got))
			}
			if !errors.Is(err, ErrInvalidTable) {
				t.Errorf("error %v is not ErrInvalidTable", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// TestParseNBFTEveryTruncation cuts the sample at every length and
// repairs header length and checksum, so each cut is a table whose
// descriptors and heap claim bytes it no longer has.
func TestParseNBFTEveryTruncation(t *testing.T) {
	full, _ := sampleSpec().build()
	for n := 0; n < len(full); n++ {
		b := bytes.Clone(full[:n])
		if n >= specHeaderLen {
			seal(b)
		}
		if got, err := ParseNBFT(b); err == nil {
			t.Fatalf("cut at %d of %d accepted: %s", n, len(full), dump(got))
		} else if !errors.Is(err, ErrInvalidTable) {
			t.Fatalf("cut at %d: %v is not ErrInvalidTable", n, err)
		}
	}
}

func TestReadNBFT(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "sys/firmware/acpi/tables")
	good, _ := sampleSpec().build()
	bad := bytes.Clone(good)
	bad[200]++
	writeFile(t, filepath.Join(dir, "NBFT1"), good)
	writeFile(t, filepath.Join(dir, "NBFT2"), bad)
	writeFile(t, filepath.Join(dir, "FACP"), []byte("not ours"))
	if err := os.MkdirAll(filepath.Join(dir, "dynamic"), 0o755); err != nil {
		t.Fatal(err)
	}

	tables, err := ReadNBFT(root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "NBFT2")) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("error %v does not name NBFT2's checksum", err)
	}
	if len(tables) != 1 || tables[0].Source != filepath.Join(dir, "NBFT1") || len(tables[0].Subsystems) != 1 {
		t.Fatalf("got %d tables (%v), want NBFT1 with its subsystem", len(tables), tables)
	}

	none, err := ReadNBFT(t.TempDir())
	if none != nil || err != nil {
		t.Errorf("no tables directory: %v, %v", none, err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fuzzSeeds are the tables committed in testdata/fuzz/FuzzParseNBFT,
// with whether each must parse.
func fuzzSeeds() map[string]struct {
	table []byte
	valid bool
} {
	type seed = struct {
		table []byte
		valid bool
	}
	build := buildSpec
	truncated := build(nil)
	truncated = truncated[:len(truncated)-20]
	seal(truncated)
	lying := build(nil)
	le.PutUint32(lying[specHeaderLen+8:], 0xfffffff0) // host descriptor offset
	seal(lying)
	return map[string]seed{
		"sample": {build(nil), true},
		"multipath": {build(func(s *nbftSpec) {
			s.hfis = append(s.hfis, s.hfis[0])
			s.hfis[1].index = 2
			s.ssns[0].secondary = []byte{2}
		}), true},
		"ipv6":        {build(func(s *nbftSpec) { s.ssns[0].traddr = ipBytes("fd00::5") }), true},
		"no-control":  {build(func(s *nbftSpec) { s.controlFlags = 0 }), true},
		"empty-lists": {build(func(s *nbftSpec) { s.hfis, s.ssns, s.sec, s.disc = nil, nil, nil, nil }), true},
		"truncated":   {truncated, false},
		"lying-host":  {lying, false},
	}
}

func FuzzParseNBFT(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.table)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFuzzParse(t, b)
		// Random bytes almost never carry a matching length and
		// checksum; repairing them lets the fuzzer reach the
		// descriptors.
		if len(b) >= specHeaderLen {
			fixed := bytes.Clone(b)
			seal(fixed)
			checkFuzzParse(t, fixed)
		}
	})
}

func checkFuzzParse(t *testing.T, b []byte) {
	orig := bytes.Clone(b)
	got, err := ParseNBFT(b)
	if !bytes.Equal(orig, b) {
		t.Fatal("ParseNBFT changed its input")
	}
	if err != nil {
		if !errors.Is(err, ErrInvalidTable) || got != nil {
			t.Fatalf("error %v (table %v) is not a bare ErrInvalidTable", err, got)
		}
		return
	}
	again, err := ParseNBFT(b)
	if err != nil || !reflect.DeepEqual(got, again) {
		t.Fatalf("ParseNBFT is not deterministic: %v", err)
	}
	var sum byte
	for _, c := range b {
		sum += c
	}
	if sum != 0 || int(le.Uint32(b[4:])) != len(b) || string(b[:4]) != "NBFT" {
		t.Fatal("accepted a table with a bad checksum, length or signature")
	}
	strs := []string{got.Host.NQN}
	for _, s := range got.Subsystems {
		strs = append(strs, s.NQN, s.TrSvcID, s.DHCPRootPath, s.Address)
	}
	for _, d := range got.Discovery {
		strs = append(strs, d.URI, d.NQN)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("parsed string %q holds NUL or is not UTF-8", s)
		}
		if len(s) > len(b) {
			t.Fatalf("parsed string of %d bytes from a %d-byte table", len(s), len(b))
		}
	}
	if !got.Valid && (len(got.HFIs)+len(got.Subsystems)+len(got.Security)+len(got.Discovery) > 0 || got.Host.Valid) {
		t.Fatal("a table without Block Valid yielded descriptors")
	}
}

// TestFuzzSeeds keeps the committed corpus equal to what the builder
// makes (regenerate with -write-seeds) and checks each seed's outcome.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseNBFT")
	seeds := fuzzSeeds()
	names := make([]string, 0, len(seeds))
	for name := range seeds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		seed := seeds[name]
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed.table)
			if *writeSeeds {
				writeFile(t, path, []byte(body))
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("seed missing (regenerate with -write-seeds): %v", err)
			}
			if string(onDisk) != body {
				t.Fatalf("%s differs from the builder's table (regenerate with -write-seeds)", path)
			}
			_, err = ParseNBFT(seed.table)
			if (err == nil) != seed.valid {
				t.Errorf("seed %s: ParseNBFT error %v, want valid=%v", name, err, seed.valid)
			}
		})
	}
}
