package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/secret"
)

const fakeRecovery = "cbdefghi-jklnrtuv-cbdefghi-jklnrtuv-cbdefghi-jklnrtuv-cbdefghi-jklnrtuv"

// AddRecoveryKey of the fake enrols a recovery key with a key file the
// header has.
func (f *fakeDMCrypt) AddRecoveryKey(_ context.Context, o CryptOpen) (secret.Value, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.headers[o.Device]
	for _, k := range o.Keys {
		if slices.Contains(h.keys, k.File) {
			h.keys = append(h.keys, "recovery:"+fakeRecovery)
			f.headers[o.Device] = h
			return secret.FromBytes([]byte(fakeRecovery)), nil
		}
	}
	return secret.Value{}, ErrLocked
}

// volumed recovery-key through the API: refused for a volume that is
// not encrypted or not known, enrolled for an encrypted one, and the
// key is in the reply only, not in the volume's history.
func TestRecoveryKeyThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	a, f := cryptAgent(t)
	d := encrypted(netVolume("a"), "/etc/k")
	plain := netVolume("p")
	a.manifests.replace(map[string]*Desired{"a": d, "p": plain}, nil)
	for _, v := range []*Desired{d, plain} {
		if err := a.opAttach(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.opOpen(ctx, d); err != nil {
		t.Fatal(err)
	}
	ask := func(name string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/volumes/"+name+"/recovery-key", nil)
		r.SetPathValue("name", name)
		w := httptest.NewRecorder()
		a.serveRecoveryKey(w, r)
		return w
	}
	if w := ask("nope"); w.Code != http.StatusNotFound {
		t.Errorf("an unknown volume: %d %s, want 404", w.Code, w.Body)
	}
	if w := ask("p"); w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "not encrypted") {
		t.Errorf("a volume with no encryption: %d %s", w.Code, w.Body)
	}
	w := ask("a")
	var reply api.RecoveryKeyReply
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &reply) != nil || reply.Key != fakeRecovery {
		t.Fatalf("recovery key: %d %s", w.Code, w.Body)
	}
	if !slices.Contains(f.headers["/dev/fake-a"].keys, "recovery:"+fakeRecovery) {
		t.Fatal("the recovery key is not in the header")
	}
	ev := a.history.of("a")
	if len(ev) == 0 || ev[len(ev)-1].Op != OpRecoveryKey || ev[len(ev)-1].Result != "success" {
		t.Fatalf("history %+v, want the recovery-key operation last", ev)
	}
	for _, e := range ev {
		if strings.Contains(e.Error, fakeRecovery) {
			t.Fatal("the key is in the history")
		}
	}
	// With the manifest's keys wrong, nothing is enrolled and the
	// reason comes back.
	a.manifests.replace(map[string]*Desired{"a": encrypted(netVolume("a"), "/etc/wrong")}, nil)
	for range 2 { // refused twice: no backoff holds the second ask
		if _, err := a.RecoveryKey(ctx, "a"); !errors.Is(err, ErrLocked) {
			t.Fatalf("recovery key with keys that do not open: %v, want ErrLocked", err)
		}
	}
	if _, failed := a.exec.LastFailure("a"); failed {
		t.Error("a refused recovery key is recorded as the volume's failure")
	}
}
