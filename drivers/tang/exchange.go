package tang

import (
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"

	"filippo.io/nistec"
	josecipher "github.com/go-jose/go-jose/v4/cipher"
)

// The McCallum–Relyea exchange. At binding the client made an ephemeral
// key c, published C = cG (the JWE's epk) and used Z = cS, S = sG being
// the server's exchange key, for ECDH-ES. To get Z back it sends the
// server X = C + eE's blinding (E = eG for a fresh e), the server
// answers Y = sX = Z + eS, and Z = Y - eS. The server learns neither Z
// nor C.

const p521Len = 66

// point is an ecdsa public key as a nistec point.
func point(k *ecdsa.PublicKey) (*nistec.P521Point, error) {
	b, err := k.Bytes()
	if err != nil {
		return nil, err
	}
	return nistec.NewP521Point().SetBytes(b)
}

// blind returns X = C + eG and the fresh scalar e.
func blind(c *ecdsa.PublicKey) (*nistec.P521Point, []byte, error) {
	priv, err := ecdh.P521().GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	e := priv.Bytes()
	eg, err := nistec.NewP521Point().ScalarBaseMult(e)
	if err != nil {
		return nil, nil, err
	}
	cp, err := point(c)
	if err != nil {
		return nil, nil, err
	}
	return nistec.NewP521Point().Add(cp, eg), e, nil
}

// unblind returns the x coordinate of Z = Y - eS.
func unblind(y, s *ecdsa.PublicKey, e []byte) ([]byte, error) {
	yp, err := point(y)
	if err != nil {
		return nil, err
	}
	sp, err := point(s)
	if err != nil {
		return nil, err
	}
	es, err := nistec.NewP521Point().ScalarMult(sp, e)
	if err != nil {
		return nil, err
	}
	z := nistec.NewP521Point().Add(yp, nistec.NewP521Point().Negate(es))
	if z.IsInfinity() == 1 {
		return nil, errors.New("the exchange gave the point at infinity")
	}
	return z.BytesX()
}

// ecmrJWK is a point as Tang's /rec takes it: an ECMR exchange key.
func ecmrJWK(p *nistec.P521Point) map[string]any {
	b := p.Bytes() // 0x04 || x || y
	enc := base64.RawURLEncoding.EncodeToString
	return map[string]any{
		"kty": "EC", "crv": "P-521", "alg": "ECMR", "key_ops": []string{"deriveKey"},
		"x": enc(b[1 : 1+p521Len]), "y": enc(b[1+p521Len:]),
	}
}

// concatKDF is ECDH-ES's key derivation (RFC 7518 4.6.2) from Z's x
// coordinate, for the content encryption enc.
func concatKDF(zx []byte, enc string, apu, apv []byte, size int) []byte {
	prefixed := func(b []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		return append(out, b...)
	}
	bits := binary.BigEndian.AppendUint32(nil, uint32(size*8))
	r := josecipher.NewConcatKDF(crypto.SHA256, zx, prefixed([]byte(enc)), prefixed(apu), prefixed(apv), bits, nil)
	key := make([]byte, size)
	_, _ = r.Read(key) // a ConcatKDF reader never fails
	return key
}
