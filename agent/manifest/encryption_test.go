package manifest_test

import (
	"slices"
	"testing"

	. "github.com/volumed/volumed/agent/manifest"
)

// loopEnc is a loop volume with an ext4 filesystem; the encryption block
// of each case follows it, from line 9.
const loopEnc = vol + "  source: {loop: {file: /x.img}}\n" + ext4 + "  encryption:\n"

// thp is a thumbprint's shape: 43 base64url characters.
const thp = "QBM8a7lCilXKlGyHp-llR8T8vX4N9El0XJU8-kDbfSU"

func TestEncryptionProblems(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"no luks2", loopEnc + "    luks1: {}\n", []string{
			`x.yaml:8:3: spec.encryption.luks2: required (the only encryption there is)`,
			`x.yaml:9:5: spec.encryption.luks1: unknown field (did you mean "luks2"?)`,
		}},
		{"no keys", loopEnc + "    luks2: {keys: []}\n", []string{
			`x.yaml:9:13: spec.encryption.luks2.keys: at least one key is required ({file: PATH}, {tpm2: {pcrs: [...]}} or {tang: {url: URL, thumbprint: THP}})`,
		}},
		{"relative key file", loopEnc + "    luks2: {keys: [{file: keys/data}]}\n", []string{
			`x.yaml:9:27: spec.encryption.luks2.keys[0].file: must be an absolute path, got "keys/data"`,
		}},
		{"file and tpm2 in one key", loopEnc + "    luks2: {keys: [{file: /k, tpm2: {pcrs: [7]}}]}\n", []string{
			`x.yaml:9:20: spec.encryption.luks2.keys[0]: exactly one of file, tpm2, tang, threshold is required, got file and tpm2`,
		}},
		{"empty key", loopEnc + "    luks2: {keys: [{}]}\n", []string{
			`x.yaml:9:20: spec.encryption.luks2.keys[0]: exactly one of file, tpm2, tang, threshold is required, got none`,
		}},
		{"duplicate key file", loopEnc + "    luks2: {keys: [{file: /k}, {file: /k}]}\n", []string{
			`x.yaml:9:39: spec.encryption.luks2.keys[1].file: duplicate of spec.encryption.luks2.keys[0].file`,
		}},
		{"pcr out of range", loopEnc + "    luks2: {keys: [{tpm2: {pcrs: [7, 24, -1]}}]}\n", []string{
			`x.yaml:9:38: spec.encryption.luks2.keys[0].tpm2.pcrs[1]: must be a PCR index from 0 to 23, got 24`,
			`x.yaml:9:42: spec.encryption.luks2.keys[0].tpm2.pcrs[2]: must be a PCR index from 0 to 23, got -1`,
		}},
		{"duplicate pcr", loopEnc + "    luks2: {keys: [{tpm2: {pcrs: [7, 7]}}]}\n", []string{
			`x.yaml:9:38: spec.encryption.luks2.keys[0].tpm2.pcrs[1]: duplicate of spec.encryption.luks2.keys[0].tpm2.pcrs[0]`,
		}},
		{"no pcrs", loopEnc + "    luks2: {keys: [{tpm2: {pcrs: []}}]}\n", []string{
			`x.yaml:9:28: spec.encryption.luks2.keys[0].tpm2.pcrs: at least one PCR is required (e.g. [7]: the Secure Boot state)`,
		}},
		{"pcr not a number", loopEnc + "    luks2: {keys: [{tpm2: {pcrs: [seven]}}]}\n", []string{
			`x.yaml:9:35: spec.encryption.luks2.keys[0].tpm2.pcrs[0]: expected an integer, got "seven"`,
		}},
		{"two tpm2 keys", loopEnc + "    luks2: {keys: [{tpm2: {pcrs: [7]}}, {tpm2: {pcrs: [0]}}]}\n", []string{
			`x.yaml:9:42: spec.encryption.luks2.keys[1].tpm2: duplicate of spec.encryption.luks2.keys[0].tpm2: one TPM2 key per volume`,
		}},
		{"tang without thumbprint", loopEnc + "    luks2: {keys: [{tang: {url: http://tang.lan}}]}\n", []string{
			`x.yaml:9:21: spec.encryption.luks2.keys[0].tang.thumbprint: required: the server's signing key is pinned by it (run tang-show-keys on the server)`,
		}},
		{"tang with a bad url and thumbprint", loopEnc + "    luks2: {keys: [{tang: {url: tang.lan, thumbprint: abc}}]}\n", []string{
			`x.yaml:9:33: spec.encryption.luks2.keys[0].tang.url: must be an http:// or https:// URL with a host, got "tang.lan"`,
			`x.yaml:9:55: spec.encryption.luks2.keys[0].tang.thumbprint: must be a JWK thumbprint as tang-show-keys prints it (43 base64url characters), got "abc"`,
		}},
		{"two tang keys of one server", loopEnc + "    luks2: {keys: [{tang: {url: http://t, thumbprint: " + thp + "}}, {tang: {url: http://t, thumbprint: " + thp + "}}]}\n", []string{
			`x.yaml:9:115: spec.encryption.luks2.keys[1].tang.url: duplicate of spec.encryption.luks2.keys[0].tang.url`,
		}},
		{"file and tang in one key", loopEnc + "    luks2: {keys: [{file: /k, tang: {url: http://t, thumbprint: " + thp + "}}]}\n", []string{
			`x.yaml:9:20: spec.encryption.luks2.keys[0]: exactly one of file, tpm2, tang, threshold is required, got file and tang`,
		}},
		{"threshold above its keys", loopEnc + "    luks2: {keys: [{threshold: {n: 3, keys: [{tang: {url: http://a, thumbprint: " + thp + "}}, {tang: {url: http://b, thumbprint: " + thp + "}}]}}]}\n", []string{
			`x.yaml:9:36: spec.encryption.luks2.keys[0].threshold.n: is 3 but there are only 2 keys: the key could never be recovered`,
		}},
		{"file in a threshold", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: [{file: /k}]}}]}\n", []string{
			`x.yaml:9:46: spec.encryption.luks2.keys[0].threshold.keys[0]: must be one tang, tpm2 or threshold key, got file (a key file is no share: it would open the volume on its own)`,
		}},
		{"threshold below one", loopEnc + "    luks2: {keys: [{threshold: {n: 0, keys: [{tpm2: {pcrs: [7]}}]}}]}\n", []string{
			`x.yaml:9:36: spec.encryption.luks2.keys[0].threshold.n: must be at least 1, got 0`,
		}},
		{"threshold of no keys", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: []}}]}\n", []string{
			`x.yaml:9:39: spec.encryption.luks2.keys[0].threshold.keys: at least one key is required (tang, tpm2 or threshold keys)`,
		}},
		{"two tpm2 keys in a threshold", loopEnc + "    luks2: {keys: [{threshold: {n: 2, keys: [{tpm2: {pcrs: [7]}}, {tpm2: {pcrs: [0]}}]}}]}\n", []string{
			`x.yaml:9:68: spec.encryption.luks2.keys[0].threshold.keys[1].tpm2: duplicate of spec.encryption.luks2.keys[0].threshold.keys[0].tpm2: one TPM2 key per threshold (both shares would come from the one TPM)`,
		}},
		{"bad pcr in a threshold", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: [{tpm2: {pcrs: [24]}}]}}]}\n", []string{
			`x.yaml:9:61: spec.encryption.luks2.keys[0].threshold.keys[0].tpm2.pcrs[0]: must be a PCR index from 0 to 23, got 24`,
		}},
		{"nested threshold above its keys", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: [{threshold: {n: 2, keys: [{tpm2: {pcrs: [7]}}]}}]}}]}\n", []string{
			`x.yaml:9:62: spec.encryption.luks2.keys[0].threshold.keys[0].threshold.n: is 2 but there are only 1 keys: the key could never be recovered`,
		}},
		{"threshold nested two deep", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: [{threshold: {n: 1, keys: [{threshold: {n: 1, keys: []}}]}}]}}]}\n", []string{
			`x.yaml:9:73: spec.encryption.luks2.keys[0].threshold.keys[0].threshold.keys[0].threshold: a threshold in a threshold in a threshold: thresholds nest one level deep`,
		}},
		// Deeper than that, with its keys, a manifest's nesting limit
		// names the field first.
		{"thresholds nested two deep with keys", loopEnc + "    luks2: {keys: [{threshold: {n: 1, keys: [{threshold: {n: 1, keys: [{threshold: {n: 1, keys: [{tpm2: {pcrs: [7]}}]}}]}}]}}]}\n", []string{
			`x.yaml:9:106: spec.encryption.luks2.keys[0].threshold.keys[0].threshold.keys[0].threshold.keys[0].tpm2.pcrs: nested too deeply (more than 16 levels)`,
			`x.yaml:9:112: spec.encryption.luks2.keys[0].threshold.keys[0].threshold.keys[0].threshold.keys[0].tpm2.pcrs: nested too deeply (more than 16 levels)`,
		}},
		{"bad sector size", loopEnc + "    luks2: {keys: [{file: /k}], sectorSize: 1000}\n", []string{
			`x.yaml:9:45: spec.encryption.luks2.sectorSize: must be 512, 1024, 2048 or 4096, got 1000`,
		}},
		{"bad pbkdf", loopEnc + "    luks2: {keys: [{file: /k}], pbkdf: scrypt}\n", []string{
			`x.yaml:9:40: spec.encryption.luks2.pbkdf: must be argon2id or pbkdf2, got "scrypt"`,
		}},
		{"bad cipher", loopEnc + "    luks2: {keys: [{file: /k}], cipher: \"aes xts\"}\n", []string{
			`x.yaml:9:41: spec.encryption.luks2.cipher: must be a cryptsetup cipher such as aes-xts-plain64, got "aes xts"`,
		}},
		{"directory source", vol + "  source: {directory: {path: /srv/d}}\n  encryption: {luks2: {keys: [{file: /k}]}}\n", []string{
			`x.yaml:7:3: spec.encryption: not allowed with a directory source: only a block device is encrypted`,
		}},
		{"tmpfs source", vol + "  source: {tmpfs: {size: 1Mi}}\n  encryption: {luks2: {keys: [{file: /k}]}}\n", []string{
			`x.yaml:7:3: spec.encryption: not allowed with a tmpfs source: only a block device is encrypted`,
		}},
		{"read-only source", vol + "  source: {loop: {file: /x.img, readOnly: true}}\n" + ext4 + "  encryption: {luks2: {keys: [{file: /k}]}}\n", []string{
			`x.yaml:8:3: spec.encryption: not allowed on a read-only source (spec.source.loop): a LUKS2 header cannot be written or its keys enrolled`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantProblems(t, tt.in, tt.want) })
	}
}

func TestEncryptionGood(t *testing.T) {
	in := loopEnc + "    luks2:\n      keys:\n        - file: /etc/volumed/keys/data\n        - tpm2: {pcrs: [7, 0]}\n      cipher: aes-xts-plain64\n      sectorSize: 4096\n"
	objs, probs := ParseBytes("x.yaml", []byte(in), testOpts)
	if len(probs) > 0 {
		t.Fatalf("problems: %q", render(probs))
	}
	l := objs[0].Volume.Encryption.LUKS2
	if len(l.Keys) != 2 || l.Keys[0].File != "/etc/volumed/keys/data" || l.Keys[0].Kind() != "file" ||
		l.Keys[1].Kind() != "tpm2" || !slices.Equal(l.Keys[1].TPM2.PCRs, []int{7, 0}) {
		t.Errorf("keys %+v", l.Keys)
	}
	if l.Cipher != "aes-xts-plain64" || l.SectorSize != 4096 || l.PBKDF != PBKDFArgon2id {
		t.Errorf("cipher %q, sector size %d, pbkdf %q (want the default argon2id)", l.Cipher, l.SectorSize, l.PBKDF)
	}
}

// A threshold of the TPM2 and Tang, and one nesting a threshold: good.
func TestThresholdGood(t *testing.T) {
	tang := func(u string) string { return "{tang: {url: " + u + ", thumbprint: " + thp + "}}" }
	for _, keys := range []string{
		"[{threshold: {n: 2, keys: [{tpm2: {pcrs: [7]}}, " + tang("http://a") + "]}}]",
		"[{tpm2: {pcrs: [7]}}, {threshold: {n: 2, keys: [{tpm2: {pcrs: [7]}}, {threshold: {n: 1, keys: [" + tang("http://a") + ", " + tang("http://b") + "]}}]}}]",
	} {
		objs, probs := ParseBytes("x.yaml", []byte(loopEnc+"    luks2: {keys: "+keys+"}\n"), testOpts)
		if len(probs) > 0 || len(objs) != 1 {
			t.Errorf("%s: problems %q", keys, render(probs))
			continue
		}
		ks := objs[0].Volume.Encryption.LUKS2.Keys
		if th := ks[len(ks)-1].Threshold; th == nil || th.N != 2 || th.Keys[0].Kind() != "tpm2" {
			t.Errorf("%s: keys %+v", keys, ks)
		}
	}
}
