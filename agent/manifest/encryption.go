package manifest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// LUKS2 sector sizes cryptsetup accepts.
var luksSectorSizes = []int{512, 1024, 2048, 4096}

// cipherRE is cryptsetup's cipher-chainmode-ivmode spelling, e.g.
// aes-xts-plain64 or capi:xts(aes)-plain64; checked only for its shape
// (the kernel's crypto API has the last word, at luksFormat).
var cipherRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_:()]*(-[a-z0-9_:()]+)*$`)

// MaxPCR is the highest PCR index of a TPM2 (PC client: 24 PCRs).
const MaxPCR = 23

// encryption checks spec.encryption: only on a writable block source,
// LUKS2 with at least one key, each a file, a TPM2 seal or a Tang
// binding.
func (v *validator) encryption(e *Encryption, src *Source, staged bool) {
	switch {
	case staged:
		v.report("spec.encryption", fmt.Sprintf("not allowed with %s %s source: only a block device is encrypted", article(src.Kind), src.Kind))
		return
	case src.Caps.ReadOnly:
		v.report("spec.encryption", fmt.Sprintf("not allowed on a read-only source (spec.source.%s): a LUKS2 header cannot be written or its keys enrolled", src.Kind))
		return
	case e.LUKS2 == nil:
		v.report("spec.encryption.luks2", "required (the only encryption there is)")
		return
	}
	l := e.LUKS2
	if len(l.Keys) == 0 {
		v.report("spec.encryption.luks2.keys", "at least one key is required ({file: PATH}, {tpm2: {pcrs: [...]}} or {tang: {url: URL, thumbprint: THP}})")
	}
	files := map[string]int{}
	tangs := map[string]int{}
	tpm2 := -1
	for i, k := range l.Keys {
		field := fmt.Sprintf("spec.encryption.luks2.keys[%d]", i)
		if set := keyKinds(k); len(set) != 1 {
			got := "none"
			if len(set) > 0 {
				got = strings.Join(set, " and ")
			}
			v.report(field, "exactly one of file, tpm2, tang, threshold is required, got "+got)
			continue
		}
		switch {
		case k.File != "":
			if j, dup := files[k.File]; dup {
				v.report(field+".file", fmt.Sprintf("duplicate of spec.encryption.luks2.keys[%d].file", j))
				continue
			}
			files[k.File] = i
			v.secretFile(field+".file", k.File, true)
		case k.Threshold != nil:
			v.threshold(field+".threshold", k.Threshold, false)
		case k.Tang != nil:
			if j, dup := tangs[k.Tang.URL]; dup {
				v.report(field+".tang.url", fmt.Sprintf("duplicate of spec.encryption.luks2.keys[%d].tang.url", j))
				continue
			}
			tangs[k.Tang.URL] = i
			v.tang(field+".tang", k.Tang)
		default:
			if tpm2 >= 0 {
				v.report(field+".tpm2", fmt.Sprintf("duplicate of spec.encryption.luks2.keys[%d].tpm2: one TPM2 key per volume", tpm2))
				continue
			}
			tpm2 = i
			v.pcrs(field+".tpm2.pcrs", k.TPM2.PCRs)
		}
	}
	if l.Cipher != "" && !cipherRE.MatchString(l.Cipher) {
		v.report("spec.encryption.luks2.cipher", fmt.Sprintf("must be a cryptsetup cipher such as aes-xts-plain64, got %q", l.Cipher))
	}
	switch l.PBKDF {
	case "":
		l.PBKDF = PBKDFArgon2id
	case PBKDFArgon2id, PBKDFPBKDF2:
	default:
		v.report("spec.encryption.luks2.pbkdf", fmt.Sprintf("must be %s or %s, got %q", PBKDFArgon2id, PBKDFPBKDF2, l.PBKDF))
	}
	if l.SectorSize != 0 && !slices.Contains(luksSectorSizes, l.SectorSize) {
		v.report("spec.encryption.luks2.sectorSize", fmt.Sprintf("must be 512, 1024, 2048 or 4096, got %d", l.SectorSize))
	}
}

func (v *validator) pcrs(field string, pcrs []int) {
	if len(pcrs) == 0 {
		v.report(field, "at least one PCR is required (e.g. [7]: the Secure Boot state)")
		return
	}
	seen := map[int]int{}
	for i, p := range pcrs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p < 0 || p > MaxPCR {
			v.report(f, fmt.Sprintf("must be a PCR index from 0 to %d, got %d", MaxPCR, p))
			continue
		}
		if j, dup := seen[p]; dup {
			v.report(f, fmt.Sprintf("duplicate of %s[%d]", field, j))
			continue
		}
		seen[p] = i
	}
}

// keyKinds names the kinds a key sets; exactly one is valid.
func keyKinds(k LUKS2Key) []string {
	var set []string
	if k.File != "" {
		set = append(set, "file")
	}
	if k.TPM2 != nil {
		set = append(set, "tpm2")
	}
	if k.Tang != nil {
		set = append(set, "tang")
	}
	if k.Threshold != nil {
		set = append(set, "threshold")
	}
	return set
}

// tang checks a Tang key: an http(s) URL with a host, and the signing
// key's thumbprint (SHA-256, or the SHA-1 older Clevis bindings use,
// base64url without padding).
func (v *validator) tang(field string, k *TangKey) {
	u, err := url.Parse(k.URL)
	switch {
	case k.URL == "":
		v.report(field+".url", "required (the Tang server, e.g. http://tang.lan:7500)")
	case err != nil:
		v.report(field+".url", fmt.Sprintf("not a URL: %v", err))
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		v.report(field+".url", fmt.Sprintf("must be an http:// or https:// URL with a host, got %q", k.URL))
	}
	b, err := base64.RawURLEncoding.DecodeString(k.Thumbprint)
	switch {
	case k.Thumbprint == "":
		v.report(field+".thumbprint", "required: the server's signing key is pinned by it (run tang-show-keys on the server)")
	case err != nil || (len(b) != sha256.Size && len(b) != sha1.Size):
		v.report(field+".thumbprint", fmt.Sprintf("must be a JWK thumbprint as tang-show-keys prints it (43 base64url characters), got %q", k.Thumbprint))
	}
}

// threshold checks a threshold key: n from 1 to the number of its keys,
// each a Tang key of its own server, the TPM2 (once) or, in a threshold
// of spec.encryption.luks2.keys, a threshold (Clevis' sss pin nests; one
// level is what a manifest needs: "TPM2 and one of two Tang servers").
func (v *validator) threshold(field string, t *ThresholdKey, nested bool) {
	switch {
	case len(t.Keys) == 0:
		v.report(field+".keys", "at least one key is required (tang, tpm2 or threshold keys)")
	case t.N < 1:
		v.report(field+".n", fmt.Sprintf("must be at least 1, got %d", t.N))
	case t.N > len(t.Keys):
		v.report(field+".n", fmt.Sprintf("is %d but there are only %d keys: the key could never be recovered", t.N, len(t.Keys)))
	}
	urls := map[string]int{}
	tpm2 := -1
	for i, k := range t.Keys {
		f := fmt.Sprintf("%s.keys[%d]", field, i)
		kinds := keyKinds(k)
		switch {
		case len(kinds) != 1 || k.File != "":
			got := strings.Join(kinds, " and ")
			if got == "" {
				got = "none"
			}
			v.report(f, fmt.Sprintf("must be one tang, tpm2 or threshold key, got %s (a key file is no share: it would open the volume on its own)", got))
		case k.Threshold != nil && nested:
			v.report(f+".threshold", "a threshold in a threshold in a threshold: thresholds nest one level deep")
		case k.Threshold != nil:
			v.threshold(f+".threshold", k.Threshold, true)
		case k.TPM2 != nil && tpm2 >= 0:
			v.report(f+".tpm2", fmt.Sprintf("duplicate of %s.keys[%d].tpm2: one TPM2 key per threshold (both shares would come from the one TPM)", field, tpm2))
		case k.TPM2 != nil:
			tpm2 = i
			v.pcrs(f+".tpm2.pcrs", k.TPM2.PCRs)
		default:
			if j, dup := urls[k.Tang.URL]; dup {
				v.report(f+".tang.url", fmt.Sprintf("duplicate of %s.keys[%d].tang.url", field, j))
				continue
			}
			urls[k.Tang.URL] = i
			v.tang(f+".tang", k.Tang)
		}
	}
}
