// Package tpm2 seals a secret to the values of a TPM2's PCRs and unseals
// it, the way systemd-cryptenroll does, so that a LUKS2 volume enrolled by
// volumed opens with systemd-cryptsetup and the other way round.
//
// The secret is the data of a keyed-hash object created under a primary
// storage key; the object's authPolicy is a PolicyPCR digest over the
// sha256 bank, so the TPM releases the secret only while those PCRs hold
// the values they held at sealing. The primary key is created afresh from
// systemd's fixed "legacy" ECC template for each operation (the TPM derives
// the same key from its owner seed every time), and flushed after it;
// nothing is made persistent in the TPM.
package tpm2

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	gotpm "github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// Bank and PrimaryAlg are what a sealed object records in systemd's token
// fields tpm2-pcr-bank and tpm2-primary-alg.
const (
	Bank       = "sha256"
	PrimaryAlg = "ecc"
	// MaxPCR is the highest PCR of a PC client TPM.
	MaxPCR = 23
)

// ErrPolicy: the PCRs no longer hold the values the secret was sealed
// to (another boot chain, or a PCR extended since). A *PolicyError
// wraps it and says which.
var ErrPolicy = errors.New("the PCRs do not match the sealed policy")

// PolicyError says which PCRs a secret was sealed to and, where the
// sealed values are known, which of them differ now. It never holds the
// secret.
type PolicyError struct {
	Sealed []int // the PCRs of the policy
	Differ []int // the ones whose value changed; nil when unknown
}

func (e *PolicyError) Error() string {
	if len(e.Differ) == 1 {
		return fmt.Sprintf("PCR %d differs from the sealed policy (sealed to %s PCRs %s)", e.Differ[0], Bank, JoinPCRs(e.Sealed))
	}
	if len(e.Differ) > 1 {
		return fmt.Sprintf("PCRs %s differ from the sealed policy (sealed to %s PCRs %s)", JoinPCRs(e.Differ), Bank, JoinPCRs(e.Sealed))
	}
	return fmt.Sprintf("the values of %s PCRs %s differ from the sealed policy", Bank, JoinPCRs(e.Sealed))
}

func (e *PolicyError) Unwrap() error { return ErrPolicy }

// JoinPCRs writes PCRs as systemd does: "7+11".
func JoinPCRs(pcrs []int) string {
	s := make([]string, len(pcrs))
	for i, p := range pcrs {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, "+")
}

// Sealed is a sealed secret: everything needed to unseal it on the same
// TPM while the PCRs hold the same values. None of it is secret.
type Sealed struct {
	// Blob is the object's TPM2B_PRIVATE then its TPM2B_PUBLIC, as
	// systemd stores it in tpm2-blob.
	Blob []byte
	PCRs []int // sorted, sha256 bank
	// PolicyHash is the PolicyPCR digest the object is bound to.
	PolicyHash []byte
	// PCRValues are the PCRs' values at sealing (not part of systemd's
	// token: volumed keeps them to say which PCR changed).
	PCRValues map[int][]byte
}

// TPM is an open TPM2: the kernel's resource manager (/dev/tpmrm0) or,
// for tests, a software TPM's socket.
type TPM struct {
	t transport.TPMCloser
}

// New wraps a transport (tests use it with a simulator).
func New(t transport.TPMCloser) *TPM { return &TPM{t: t} }

// Close closes the device or connection.
func (t *TPM) Close() error { return t.t.Close() }

// CheckPCRs refuses PCR lists a policy cannot use.
func CheckPCRs(pcrs []int) error {
	if len(pcrs) == 0 {
		return errors.New("no PCRs to seal to")
	}
	for i, p := range pcrs {
		if p < 0 || p > MaxPCR {
			return fmt.Errorf("PCR %d is not between 0 and %d", p, MaxPCR)
		}
		if slices.Contains(pcrs[:i], p) {
			return fmt.Errorf("PCR %d is listed twice", p)
		}
	}
	return nil
}

func selection(pcrs []int) gotpm.TPMLPCRSelection {
	sel := make([]byte, (MaxPCR+1)/8)
	for _, p := range pcrs {
		sel[p/8] |= 1 << (p % 8)
	}
	return gotpm.TPMLPCRSelection{PCRSelections: []gotpm.TPMSPCRSelection{{Hash: gotpm.TPMAlgSHA256, PCRSelect: sel}}}
}

// primaryTemplate is systemd's legacy ECC primary template
// (tpm2_get_legacy_template in src/shared/tpm2-util.c), with an empty
// unique field: a token naming tpm2-primary-alg "ecc" and carrying no
// tpm2_srk is unsealed by systemd under exactly this key.
var primaryTemplate = gotpm.TPMTPublic{
	Type:    gotpm.TPMAlgECC,
	NameAlg: gotpm.TPMAlgSHA256,
	ObjectAttributes: gotpm.TPMAObject{
		FixedTPM:            true,
		FixedParent:         true,
		SensitiveDataOrigin: true,
		UserWithAuth:        true,
		Restricted:          true,
		Decrypt:             true,
	},
	Parameters: gotpm.NewTPMUPublicParms(gotpm.TPMAlgECC, &gotpm.TPMSECCParms{
		Symmetric: gotpm.TPMTSymDefObject{
			Algorithm: gotpm.TPMAlgAES,
			KeyBits:   gotpm.NewTPMUSymKeyBits(gotpm.TPMAlgAES, gotpm.TPMKeyBits(128)),
			Mode:      gotpm.NewTPMUSymMode(gotpm.TPMAlgAES, gotpm.TPMAlgCFB),
		},
		Scheme:  gotpm.TPMTECCScheme{Scheme: gotpm.TPMAlgNull},
		CurveID: gotpm.TPMECCNistP256,
		KDF:     gotpm.TPMTKDFScheme{Scheme: gotpm.TPMAlgNull},
	}),
	Unique: gotpm.NewTPMUPublicID(gotpm.TPMAlgECC, &gotpm.TPMSECCPoint{}),
}

// primary creates the primary key and returns it with an HMAC session
// salted by it that encrypts a command's first parameter as enc says
// (AESEncryption in or out): the secret going into Create, or coming out
// of Unseal, crosses the bus and the resource manager encrypted, as
// systemd's does.
func (t *TPM) primary(enc gotpm.AuthOption) (gotpm.NamedHandle, gotpm.Session, func(), error) {
	rsp, err := gotpm.CreatePrimary{
		PrimaryHandle: gotpm.TPMRHOwner,
		InPublic:      gotpm.New2B(primaryTemplate),
	}.Execute(t.t)
	if err != nil {
		return gotpm.NamedHandle{}, nil, nil, fmt.Errorf("create the primary key: %w", err)
	}
	h := gotpm.NamedHandle{Handle: rsp.ObjectHandle, Name: rsp.Name}
	flush := func() { t.flush(h.Handle) }
	pub, err := rsp.OutPublic.Contents()
	if err != nil {
		flush()
		return gotpm.NamedHandle{}, nil, nil, fmt.Errorf("the primary key's public part: %w", err)
	}
	return h, gotpm.HMAC(gotpm.TPMAlgSHA256, 16, enc, gotpm.Salted(h.Handle, *pub)), flush, nil
}

func (t *TPM) flush(h gotpm.TPMHandle) {
	// A failed flush leaves a transient object that the resource
	// manager drops when the connection closes; nothing to report.
	_, _ = gotpm.FlushContext{FlushHandle: h}.Execute(t.t)
}

// ReadPCRs reads the sha256 values of pcrs.
func (t *TPM) ReadPCRs(pcrs []int) (map[int][]byte, error) {
	out := map[int][]byte{}
	// A TPM returns at most 8 digests per PCR_Read; ask until all came.
	left := slices.Clone(pcrs)
	for len(left) > 0 {
		rsp, err := gotpm.PCRRead{PCRSelectionIn: selection(left)}.Execute(t.t)
		if err != nil {
			return nil, fmt.Errorf("read PCRs %s: %w", JoinPCRs(left), err)
		}
		var got []int
		for _, s := range rsp.PCRSelectionOut.PCRSelections {
			for i, b := range s.PCRSelect {
				for bit := range 8 {
					if b&(1<<bit) != 0 {
						got = append(got, i*8+bit)
					}
				}
			}
		}
		if len(got) == 0 || len(got) != len(rsp.PCRValues.Digests) {
			return nil, fmt.Errorf("read PCRs %s: the TPM returned %d values for %d PCRs", JoinPCRs(left), len(rsp.PCRValues.Digests), len(got))
		}
		for i, p := range got {
			out[p] = slices.Clone(rsp.PCRValues.Digests[i].Buffer)
		}
		left = slices.DeleteFunc(left, func(p int) bool { _, ok := out[p]; return ok })
	}
	return out, nil
}

// ExtendPCR extends a PCR's sha256 bank with the digest of data (tests
// change the boot state with it).
func (t *TPM) ExtendPCR(pcr int, data []byte) error {
	if err := CheckPCRs([]int{pcr}); err != nil {
		return err
	}
	d := sha256.Sum256(data)
	_, err := gotpm.PCRExtend{
		PCRHandle: gotpm.AuthHandle{Handle: gotpm.TPMHandle(pcr), Auth: gotpm.PasswordAuth(nil)},
		Digests:   gotpm.TPMLDigestValues{Digests: []gotpm.TPMTHA{{HashAlg: gotpm.TPMAlgSHA256, Digest: d[:]}}},
	}.Execute(t.t)
	if err != nil {
		return fmt.Errorf("extend PCR %d: %w", pcr, err)
	}
	return nil
}

// policyDigest runs PolicyPCR over the current values of pcrs in a
// session (a trial one when sealing) and returns the session's digest.
func (t *TPM) policySession(pcrs []int, trial bool) (gotpm.Session, func(), []byte, error) {
	var opts []gotpm.AuthOption
	if trial {
		opts = append(opts, gotpm.Trial())
	}
	sess, closeSess, err := gotpm.PolicySession(t.t, gotpm.TPMAlgSHA256, 16, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start a policy session: %w", err)
	}
	done := func() { _ = closeSess() }
	if _, err := (gotpm.PolicyPCR{PolicySession: sess.Handle(), Pcrs: selection(pcrs)}).Execute(t.t); err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("PolicyPCR: %w", err)
	}
	dg, err := gotpm.PolicyGetDigest{PolicySession: sess.Handle()}.Execute(t.t)
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("PolicyGetDigest: %w", err)
	}
	return sess, done, dg.PolicyDigest.Buffer, nil
}

// Seal seals secret (at most 128 bytes) to the current sha256 values of
// pcrs.
func (t *TPM) Seal(secret []byte, pcrs []int) (Sealed, error) {
	if err := CheckPCRs(pcrs); err != nil {
		return Sealed{}, fmt.Errorf("tpm2 seal: %w", err)
	}
	if len(secret) == 0 || len(secret) > 128 {
		return Sealed{}, fmt.Errorf("tpm2 seal: a secret of %d bytes (1 to 128 fit)", len(secret))
	}
	pcrs = slices.Sorted(slices.Values(pcrs))
	values, err := t.ReadPCRs(pcrs)
	if err != nil {
		return Sealed{}, fmt.Errorf("tpm2 seal: %w", err)
	}
	_, done, policy, err := t.policySession(pcrs, true)
	if err != nil {
		return Sealed{}, fmt.Errorf("tpm2 seal: %w", err)
	}
	done()
	parent, enc, flush, err := t.primary(gotpm.AESEncryption(128, gotpm.EncryptIn))
	if err != nil {
		return Sealed{}, fmt.Errorf("tpm2 seal: %w", err)
	}
	defer flush()
	// systemd's sealed object: a keyed hash with no scheme, bound to
	// its parent and this TPM, usable only through the policy.
	tmpl := gotpm.TPMTPublic{
		Type:             gotpm.TPMAlgKeyedHash,
		NameAlg:          gotpm.TPMAlgSHA256,
		ObjectAttributes: gotpm.TPMAObject{FixedTPM: true, FixedParent: true},
		AuthPolicy:       gotpm.TPM2BDigest{Buffer: policy},
		Parameters: gotpm.NewTPMUPublicParms(gotpm.TPMAlgKeyedHash, &gotpm.TPMSKeyedHashParms{
			Scheme: gotpm.TPMTKeyedHashScheme{Scheme: gotpm.TPMAlgNull},
		}),
		Unique: gotpm.NewTPMUPublicID(gotpm.TPMAlgKeyedHash, &gotpm.TPM2BDigest{Buffer: make([]byte, sha256.Size)}),
	}
	rsp, err := gotpm.Create{
		ParentHandle: gotpm.AuthHandle{Handle: parent.Handle, Name: parent.Name, Auth: gotpm.PasswordAuth(nil)},
		InSensitive: gotpm.TPM2BSensitiveCreate{Sensitive: &gotpm.TPMSSensitiveCreate{
			Data: gotpm.NewTPMUSensitiveCreate(&gotpm.TPM2BSensitiveData{Buffer: secret}),
		}},
		InPublic: gotpm.New2B(tmpl),
	}.Execute(t.t, enc)
	if err != nil {
		return Sealed{}, fmt.Errorf("tpm2 seal: create the sealed object: %w", err)
	}
	blob := append(gotpm.Marshal(rsp.OutPrivate), gotpm.Marshal(rsp.OutPublic)...)
	return Sealed{Blob: blob, PCRs: pcrs, PolicyHash: policy, PCRValues: values}, nil
}

// SplitBlob cuts systemd's tpm2-blob into its TPM2B_PRIVATE and
// TPM2B_PUBLIC, each with its size prefix; the TPM parses what is inside.
func SplitBlob(blob []byte) (priv, pub []byte, err error) {
	next := func(b []byte) ([]byte, []byte, error) {
		if len(b) < 2 {
			return nil, nil, errors.New("truncated")
		}
		n := 2 + int(binary.BigEndian.Uint16(b))
		if n == 2 || n > len(b) {
			return nil, nil, fmt.Errorf("a part of %d bytes in %d", n-2, len(b)-2)
		}
		return b[:n], b[n:], nil
	}
	priv, rest, err := next(blob)
	if err != nil {
		return nil, nil, fmt.Errorf("tpm2-blob's private part: %w", err)
	}
	pub, rest, err = next(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("tpm2-blob's public part: %w", err)
	}
	if len(rest) != 0 {
		// systemd ≥ 255 may append an encrypted seed for objects it
		// sealed without a TPM; those are not handled here.
		return nil, nil, fmt.Errorf("tpm2-blob has %d bytes after its public part (an imported object, not supported)", len(rest))
	}
	return priv, pub, nil
}

// CheckBlob reports whether blob has the shape of a tpm2-blob.
func CheckBlob(blob []byte) error {
	_, _, err := SplitBlob(blob)
	return err
}

// Unseal returns the secret sealed in s if the PCRs hold the values it
// was sealed to; otherwise a *PolicyError (errors.Is ErrPolicy), and the
// TPM is not asked to unseal at all.
func (t *TPM) Unseal(s Sealed) ([]byte, error) {
	if err := CheckPCRs(s.PCRs); err != nil {
		return nil, fmt.Errorf("tpm2 unseal: %w", err)
	}
	priv, pub, err := SplitBlob(s.Blob)
	if err != nil {
		return nil, fmt.Errorf("tpm2 unseal: %w", err)
	}
	sess, done, digest, err := t.policySession(s.PCRs, false)
	if err != nil {
		return nil, fmt.Errorf("tpm2 unseal: %w", err)
	}
	defer done()
	if len(s.PolicyHash) > 0 && !bytes.Equal(digest, s.PolicyHash) {
		return nil, t.policyError(s)
	}
	parent, enc, flush, err := t.primary(gotpm.AESEncryption(128, gotpm.EncryptOut))
	if err != nil {
		return nil, fmt.Errorf("tpm2 unseal: %w", err)
	}
	defer flush()
	loaded, err := gotpm.Load{
		ParentHandle: gotpm.AuthHandle{Handle: parent.Handle, Name: parent.Name, Auth: gotpm.PasswordAuth(nil)},
		InPrivate:    gotpm.TPM2BPrivate{Buffer: priv[2:]},
		InPublic:     gotpm.BytesAs2B[gotpm.TPMTPublic](pub[2:]),
	}.Execute(t.t)
	if err != nil {
		return nil, fmt.Errorf("tpm2 unseal: load the sealed object (sealed by another TPM, or the TPM was cleared): %w", err)
	}
	defer t.flush(loaded.ObjectHandle)
	out, err := gotpm.Unseal{
		ItemHandle: gotpm.AuthHandle{Handle: loaded.ObjectHandle, Name: loaded.Name, Auth: sess},
	}.Execute(t.t, enc)
	if errors.Is(err, gotpm.TPMRCPolicyFail) {
		return nil, t.policyError(s)
	}
	if err != nil {
		return nil, fmt.Errorf("tpm2 unseal: %w", err)
	}
	return out.OutData.Buffer, nil
}

// policyError names the PCRs that changed, when the sealed values are
// known.
func (t *TPM) policyError(s Sealed) error {
	e := &PolicyError{Sealed: s.PCRs}
	if len(s.PCRValues) == 0 {
		return e
	}
	now, err := t.ReadPCRs(s.PCRs)
	if err != nil {
		return e
	}
	for _, p := range s.PCRs {
		if was, ok := s.PCRValues[p]; ok && !bytes.Equal(was, now[p]) {
			e.Differ = append(e.Differ, p)
		}
	}
	return e
}
