package luks

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/volumed/volumed/drivers/tang"
)

func TestAskOrder(t *testing.T) {
	for _, c := range []struct {
		name              string
		t                 int
		local, unanswered []bool
		want              []int
	}{
		{"all answer: the JWE's order", 2, []bool{false, false}, []bool{false, false}, []int{0, 1}},
		{"a TPM first", 2, []bool{false, true, false}, []bool{false, false, false}, []int{1, 0, 2}},
		{"2 of 2, the second server down: it first", 2, []bool{false, false}, []bool{false, true}, []int{1, 0}},
		{"2 of 2, the first down: the JWE's order", 2, []bool{false, false}, []bool{true, false}, []int{0, 1}},
		{"TPM2 and a server that is down: the server first", 2, []bool{true, false}, []bool{false, true}, []int{1, 0}},
		{"2 of 3, one down: the others meet it, the down one last", 2, []bool{false, false, false}, []bool{true, false, false}, []int{1, 2, 0}},
		{"2 of 3, two down: those first", 2, []bool{false, false, false}, []bool{true, false, true}, []int{0, 2, 1}},
		{"1 of 2, both down: the JWE's order", 1, []bool{false, false}, []bool{true, true}, []int{0, 1}},
		{"3 of 3 with a TPM, one down: it, then the TPM", 3, []bool{false, true, false}, []bool{false, false, true}, []int{2, 1, 0}},
	} {
		if got := askOrder(c.t, c.local, c.unanswered); !slices.Equal(got, c.want) {
			t.Errorf("%s: askOrder = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAnswersRemembersOnlyWhetherAServerAnswered(t *testing.T) {
	a := &Answers{}
	a.note("http://far", &tang.UnreachableError{URL: "http://far", Err: errors.New("connection refused")})
	if !a.unanswered("http://far") || a.unanswered("http://near") {
		t.Fatal("far, which did not answer, is not remembered so, or near is")
	}
	a.note("http://far", errors.New("advertisement not signed by the pinned key"))
	if a.unanswered("http://far") {
		t.Error("a server that answered (wrongly) is still taken as not answering")
	}
	var none *Answers
	none.note("http://far", &tang.UnreachableError{URL: "http://far", Err: errors.New("refused")})
	if none.unanswered("http://far") {
		t.Error("no Answers remembers something")
	}
}

// countingTransport counts the requests to each host.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Host]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) to(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[host]
}

// A threshold of 2 of near and far while far is down (test/os TestTang's
// pair): the first open exchanges with near, then finds far down; each
// retry after asks far first and, far still down, near no more: no
// share is kept between opens, and none is fetched that cannot help.
// Once far is back the key opens the header.
func TestPairRetriesAskTheDownServerFirst(t *testing.T) {
	needCryptsetup(t)
	srvs, tks := tangServers(t, 2)
	near, far := srvs[0], srvs[1]
	ct := &countingTransport{n: map[string]int{}}
	answers := &Answers{}
	for i := range tks {
		tks[i].HTTP = &http.Client{Transport: ct, Timeout: tang.DefaultTimeout}
		tks[i].Answers = answers
	}
	k := ThresholdKey{N: 2, Keys: shares(tks)}
	dev := loopImage(t)
	c := &Client{SysRoot: t.TempDir()}
	if err := c.Format(tctx(t), FormatOptions{Device: dev, UUID: testUUID, Keys: []Key{k}, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	useNoDMCryptsetup(t, c)
	open := func() error {
		_, err := c.Open(tctx(t), OpenOptions{Device: dev, Name: "volumed-pair", UUID: testUUID, Keys: []Key{k}})
		return err
	}
	far.Stop()
	nearHost := hostOf(t, near.URL)
	var asked []int
	for range 3 {
		var le *LockedError
		if err := open(); !errors.As(err, &le) || le.Waiting() == "" {
			t.Fatalf("open with far down: %v, want locked, waiting for far", err)
		}
		asked = append(asked, ct.to(nearHost))
	}
	if asked[0] == 0 || asked[1] != asked[0] || asked[2] != asked[0] {
		t.Errorf("requests to near after each open with far down: %v, want some at the first and none after", asked)
	}
	far.Resume()
	if ok, err := c.CheckKey(tctx(t), dev, k); err != nil || !ok {
		t.Fatalf("the key with far back: %v %v, want it to open the header", ok, err)
	}
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}
