package sss_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/sss"
	"github.com/volumed/volumed/drivers/tang"
	"github.com/volumed/volumed/drivers/tang/tangtest"
	"github.com/volumed/volumed/internal/testtool"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// servers starts n real tangd and returns them with their pins.
func servers(t *testing.T, n int) ([]*tangtest.Server, []tang.Server) {
	var srvs []*tangtest.Server
	var pins []tang.Server
	for range n {
		s := tangtest.Start(t)
		srvs = append(srvs, s)
		pins = append(pins, tang.Server{URL: s.URL, Thumbprint: s.Thumbprint()})
	}
	return srvs, pins
}

// recoverWith recovers each share with the pinned server that bound it.
func recoverWith(pins []tang.Server) func(context.Context, int, string) ([]byte, error) {
	return func(ctx context.Context, _ int, jwe string) ([]byte, error) {
		b, err := tang.ParseBinding(jwe)
		if err != nil {
			return nil, err
		}
		for _, p := range pins {
			if b.PinnedBy(p.Thumbprint) {
				return p.Recover(ctx, b)
			}
		}
		return nil, fmt.Errorf("no pinned server for %s", b.URL)
	}
}

// 2 of 3 Tang servers: clevis decrypts what Bind made; with one server
// down it still recovers, with two down it does not and says which
// shares failed and why.
func TestTwoOfThreeTang(t *testing.T) {
	srvs, pins := servers(t, 3)
	binders := []sss.Binder{pins[0], pins[1], pins[2]}
	jwe, err := sss.Bind(ctx(t), 2, binders, []byte("the passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	clevis := testtool.Need(t, "clevis-luks", "clevis")[0]
	cmd := exec.Command(clevis, "decrypt")
	cmd.Stdin = strings.NewReader(jwe)
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "the passphrase" {
		t.Fatalf("clevis decrypt of volumed's sss JWE: %q %v", out, err)
	}
	b, err := sss.Parse(jwe)
	if err != nil || b.T != 2 || len(b.JWEs) != 3 {
		t.Fatalf("parse: %+v %v", b, err)
	}
	srvs[0].Stop()
	if got, err := b.Recover(ctx(t), nil, recoverWith(pins)); err != nil || string(got) != "the passphrase" {
		t.Fatalf("2 of 3 with one server down: %q %v", got, err)
	}
	srvs[2].Stop()
	_, err = b.Recover(ctx(t), nil, recoverWith(pins))
	var se *sss.ShareError
	var ue *tang.UnreachableError
	if !errors.As(err, &se) || se.Got != 1 || !errors.As(err, &ue) || !strings.Contains(err.Error(), srvs[0].URL) || !strings.Contains(err.Error(), srvs[2].URL) {
		t.Fatalf("2 of 3 with two servers down: %v, want a ShareError naming both servers", err)
	}
}

// Recover opens what `clevis encrypt sss` made over Tang pins.
func TestRecoverClevisSSS(t *testing.T) {
	_, pins := servers(t, 2)
	clevis := testtool.Need(t, "clevis-luks", "clevis")[0]
	cfg := fmt.Sprintf(`{"t":1,"pins":{"tang":[{"url":%q,"thp":%q},{"url":%q,"thp":%q}]}}`, pins[0].URL, pins[0].Thumbprint, pins[1].URL, pins[1].Thumbprint)
	cmd := exec.Command(clevis, "encrypt", "sss", cfg)
	cmd.Stdin = strings.NewReader("from clevis")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("clevis encrypt sss: %v", err)
	}
	b, err := sss.Parse(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Recover(ctx(t), nil, recoverWith(pins)); err != nil || string(got) != "from clevis" {
		t.Fatalf("recover: %q %v", got, err)
	}
}

// hexPin is a pin whose "JWE" is its plaintext in hex.
type hexPin struct{}

func (hexPin) Bind(_ context.Context, p []byte) (string, error) { return hex.EncodeToString(p), nil }

// Recover asks for the shares in the order given and stops at the
// threshold; an order that is not one of the shares is refused.
func TestRecoverInOrder(t *testing.T) {
	jwe, err := sss.Bind(ctx(t), 2, []sss.Binder{hexPin{}, hexPin{}, hexPin{}}, []byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sss.Parse(jwe)
	if err != nil {
		t.Fatal(err)
	}
	var asked []int
	rec := func(_ context.Context, i int, j string) ([]byte, error) {
		asked = append(asked, i)
		return hex.DecodeString(j)
	}
	for _, c := range []struct{ order, asked []int }{{nil, []int{0, 1}}, {[]int{2, 0, 1}, []int{2, 0}}, {[]int{1, 2, 0}, []int{1, 2}}} {
		asked = nil
		if got, err := b.Recover(ctx(t), c.order, rec); err != nil || string(got) != "p" || !slices.Equal(asked, c.asked) {
			t.Errorf("order %v: %q %v, asked %v, want %v", c.order, got, err, asked, c.asked)
		}
	}
	for _, bad := range [][]int{{}, {0, 1}, {0, 1, 1}, {0, 1, 3}, {0, 1, 2, 0}} {
		asked = nil
		if _, err := b.Recover(ctx(t), bad, rec); err == nil || len(asked) > 0 {
			t.Errorf("order %v: %v, asked %v; want refused before any share", bad, err, asked)
		}
	}
}

// Once too few shares are left to meet the threshold, Recover asks no
// more of them and says which it left.
func TestRecoverStopsOutOfReach(t *testing.T) {
	jwe, err := sss.Bind(ctx(t), 2, []sss.Binder{hexPin{}, hexPin{}, hexPin{}}, []byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sss.Parse(jwe)
	if err != nil {
		t.Fatal(err)
	}
	var asked []int
	failing := func(_ context.Context, i int, j string) ([]byte, error) {
		asked = append(asked, i)
		if i != 1 {
			return nil, errors.New("down")
		}
		return hex.DecodeString(j)
	}
	_, err = b.Recover(ctx(t), []int{0, 2, 1}, failing)
	var se *sss.ShareError
	if !errors.As(err, &se) || !slices.Equal(asked, []int{0, 2}) || !slices.Equal(se.Unasked, []int{1}) ||
		!strings.Contains(err.Error(), "share 1 not asked (too few shares left to meet the threshold)") {
		t.Fatalf("2 of 3, the first two asked down: %v, asked %v; want share 1 not asked, and said", err, asked)
	}
	asked = nil
	if _, err := b.Recover(ctx(t), []int{0, 1, 2}, failing); !errors.As(err, &se) || !slices.Equal(asked, []int{0, 1, 2}) || len(se.Unasked) != 0 {
		t.Fatalf("2 of 3, one down first: %v, asked %v; want all asked", err, asked)
	}
}

func TestBindRefusesABadThreshold(t *testing.T) {
	for _, n := range []int{0, 3} {
		if _, err := sss.Bind(context.Background(), n, make([]sss.Binder, 2), nil); err == nil || !strings.Contains(err.Error(), "threshold") {
			t.Errorf("threshold %d of 2: %v", n, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("eyJjbGV2aXMiOnsicGluIjoic3NzIiwic3NzIjp7InAiOiIiLCJ0IjoxLCJqd2UiOltdfX19..a.b.c")
	f.Fuzz(func(t *testing.T, in string) {
		b, err := sss.Parse(in)
		if err == nil && (b.T < 1 || b.T > len(b.JWEs)) {
			t.Fatalf("parsed a threshold %d of %d", b.T, len(b.JWEs))
		}
	})
}
