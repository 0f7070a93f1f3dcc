// volumed recovery-key: a new recovery key enrolled in an encrypted
// volume's header, as an operation of the volume

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/store"
)

// OpRecoveryKey enrols a recovery key. It is asked for through the API,
// never planned, and runs as the volume's one operation, so no open,
// encrypt or close of the volume runs at the same time.
const OpRecoveryKey = "recovery-key"

// Errors of RecoveryKey that the API tells apart.
var (
	ErrNoVolume  = errors.New("no such volume")
	ErrOpRunning = errors.New("the volume has an operation running")
)

// RecoveryKey enrols a new recovery key in the LUKS2 header of volume
// name, opened with the manifest's keys, and returns it for the caller
// to show once. The key is kept nowhere and never logged: the operation
// is recorded in the volume's history without it.
func (a *Agent) RecoveryKey(ctx context.Context, name string) (secret.Value, error) {
	if !a.started() {
		return secret.Value{}, errors.New(errStarting)
	}
	d := a.desiredSnapshot()[name]
	if d == nil || d.Absent {
		return secret.Value{}, fmt.Errorf("volume %q: %w", name, ErrNoVolume)
	}
	if !d.Encrypted() {
		return secret.Value{}, fmt.Errorf("volume %s is not encrypted (no spec.encryption)", name)
	}
	rk, ok := a.cfg.Crypt.(RecoveryKeys)
	if !ok {
		return secret.Value{}, errors.New("recovery keys are not available in this build")
	}
	rec := a.state.Get(name)
	if rec == nil || rec.Attachment == nil {
		return secret.Value{}, fmt.Errorf("volume %s is not attached: its header is read from its device (wait until it is Ready)", name)
	}
	o := CryptOpen{Device: rec.Attachment.Device, UUID: headerUUID(rec), Keys: d.Spec.Encryption.LUKS2.Keys}
	var key secret.Value
	done := make(chan error, 1)
	// The executor sees success whatever happens: a refused recovery
	// key is the asker's answer, not the volume's failure to retry
	// with a backoff (the history still records it).
	started, _ := a.exec.Start(ctx, name, OpRecoveryKey, func(ctx context.Context) error {
		done <- a.run(ctx, name, d.Kind, OpRecoveryKey, func(ctx context.Context) error {
			var err error
			key, err = rk.AddRecoveryKey(ctx, o)
			return err
		})
		return nil
	}, nil)
	if !started {
		return secret.Value{}, fmt.Errorf("volume %s: %w; try again once it is done", name, ErrOpRunning)
	}
	select {
	case err := <-done:
		if err != nil {
			return secret.Value{}, err
		}
		return key, nil
	case <-ctx.Done():
		return secret.Value{}, ctx.Err()
	}
}

// headerUUID is the LUKS2 UUID the record knows for the volume's
// header, "" when none.
func headerUUID(rec *store.Volume) string {
	if rec.Mapping != nil {
		return rec.Mapping.UUID
	}
	return ""
}

// serveRecoveryKey answers POST /v1/volumes/{name}/recovery-key with
// the new key (the reply is the only copy; the socket is root's only).
func (a *Agent) serveRecoveryKey(w http.ResponseWriter, r *http.Request) {
	key, err := a.RecoveryKey(r.Context(), r.PathValue("name"))
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(api.RecoveryKeyReply{Key: string(key.RevealBytes())})
	case !a.started():
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, ErrNoVolume):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, ErrOpRunning):
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
