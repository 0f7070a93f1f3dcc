package luks

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/internal/testtool"
)

func tangServers(t *testing.T, n int) ([]*tangtest.Server, []TangKey) {
	var srvs []*tangtest.Server
	var keys []TangKey
	for range n {
		s := tangtest.Start(t)
		srvs = append(srvs, s)
		keys = append(keys, TangKey{URL: s.URL, Thumbprint: s.Thumbprint()})
	}
	return srvs, keys
}

// 2 of 3 Tang servers: Clevis recovers the keyslot's passphrase; with
// one server down the volume opens, with two down it is locked and the
// reason names both servers.
func TestThresholdTwoOfThree(t *testing.T) {
	needCryptsetup(t)
	srvs, tks := tangServers(t, 3)
	dev := loopImage(t)
	k := ThresholdKey{N: 2, Keys: shares(tks)}
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	_, toks := clevisTokens(t, dev)
	if len(toks) != 1 || len(toks[0].Keyslots) != 1 {
		t.Fatalf("tokens %+v, want one clevis token bound to one keyslot", toks)
	}
	pass := clevisPass(t, dev, toks[0].Keyslots[0])
	if slot, ok, err := c.slotOf(tctx(t), dev, secret.FromBytes(pass)); err != nil || !ok || slot != toks[0].Keyslots[0] {
		t.Fatalf("what clevis recovered opens slot %d %v %v", slot, ok, err)
	}
	srvs[1].Stop()
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("2 of 3 with one server down: %v %v", ok, err)
	}
	srvs[2].Stop()
	useNoDMCryptsetup(t, c)
	_, err := c.Open(tctx(t), OpenOptions{Device: dev, Name: "volumed-t", UUID: testUUID, Keys: []Key{k}})
	var le *LockedError
	if !errors.As(err, &le) || le.Waiting() == "" || !strings.Contains(err.Error(), srvs[1].URL) || !strings.Contains(err.Error(), srvs[2].URL) {
		t.Fatalf("2 of 3 with two servers down: %v, want locked, waiting, naming both servers", err)
	}
	// What the condition's message starts with: the servers waited for.
	if w := le.Waiting(); !strings.HasPrefix(w, "waiting for tang server "+srvs[1].URL+": ") || !strings.Contains(w, "; waiting for tang server "+srvs[2].URL+": ") {
		t.Fatalf("2 of 3 with two servers down waits for %q, want each server down and its error", w)
	}
}

// Two names of one Tang (the same keys, so the same thumbprint): each
// share is recovered from the server of its own URL, so the volume opens
// with both up and, with one down, waits for that one.
func TestThresholdOfServersSharingKeys(t *testing.T) {
	needCryptsetup(t)
	a := tangtest.Start(t)
	b := a.Twin(t)
	k := ThresholdKey{N: 2, Keys: []Share{TangKey{URL: a.URL, Thumbprint: a.Thumbprint()}, TangKey{URL: b.URL, Thumbprint: a.Thumbprint()}}}
	dev := img(t, 32<<20)
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("2 of 2 names of one server, both up: %v %v", ok, err)
	}
	b.Stop()
	ok, err := c.CheckKey(tctx(t), dev, k)
	if ok || err == nil || !strings.Contains(err.Error(), "waiting for tang server "+b.URL) || strings.Contains(err.Error(), "waiting for tang server "+a.URL) {
		t.Fatalf("2 of 2 with %s down: %v %v, want it waiting for that server alone", b.URL, ok, err)
	}
}

// volumed opens a volume bound by `clevis luks bind ... sss` over Tang.
func TestThresholdOpensClevisSSS(t *testing.T) {
	needCryptsetup(t)
	_, tks := tangServers(t, 2)
	clevis := testtool.Need(t, "clevis-luks", "clevis")[0]
	dev := loopImage(t)
	fk, _ := randomKey(t)
	c := &Client{}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{fk}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"t":2,"pins":{"tang":[{"url":%q,"thp":%q},{"url":%q,"thp":%q}]}}`, tks[0].URL, tks[0].Thumbprint, tks[1].URL, tks[1].Thumbprint)
	if out, err := exec.Command(clevis, "luks", "bind", "-y", "-d", dev, "-k", fk.Path, "sss", cfg).CombinedOutput(); err != nil {
		t.Fatalf("clevis luks bind sss: %v: %s", err, out)
	}
	if ok, err := c.CheckKey(tctx(t), dev, ThresholdKey{N: 2, Keys: shares(tks)}); err != nil || !ok {
		t.Fatalf("volumed's threshold key does not open what clevis bound: %v %v", ok, err)
	}
	if ok, err := c.CheckKey(tctx(t), dev, ThresholdKey{N: 1, Keys: shares(tks)}); ok || err == nil {
		t.Fatalf("a 1-of-2 key matches a 2-of-2 binding: %v %v", ok, err)
	}
}

func TestThresholdRefusesNAboveKeys(t *testing.T) {
	err := ThresholdKey{N: 3, Keys: shares(make([]TangKey, 2))}.usable(tctx(t))
	if err == nil || !strings.Contains(err.Error(), "threshold 3 of 2 keys") {
		t.Fatalf("3 of 2: %v", err)
	}
}

func shares(tks []TangKey) []Share {
	out := make([]Share, len(tks))
	for i, k := range tks {
		out[i] = k
	}
	return out
}

// The TPM2's share is asked for first, whatever its place; the others
// keep theirs.
func TestThresholdAsksTPM2First(t *testing.T) {
	a, b := TangKey{URL: "http://a"}, TangKey{URL: "http://b"}
	k := ThresholdKey{N: 2, Keys: []Share{a, TPM2Key{PCRs: []int{7}}, b}}
	for _, c := range []struct{ shares, want []int }{
		{[]int{0, 1, 2}, []int{1, 0, 2}},
		{[]int{2, 0, 1}, []int{2, 0, 1}},
		{[]int{2, 1, 0}, []int{1, 0, 2}},
	} {
		if got := k.order(c.shares); !slices.Equal(got, c.want) {
			t.Errorf("shares of keys %v: order %v, want %v", c.shares, got, c.want)
		}
	}
	if got := (ThresholdKey{N: 1, Keys: []Share{a, b}}).order([]int{1, 0}); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("two tang shares: order %v, want the JWE's", got)
	}
}
