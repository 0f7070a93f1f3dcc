package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/luks"
)

// The core tells a locked volume by agent.ErrLocked, and its condition
// shows the driver's words: each key by its description and why.
func TestLockedErrorReachesTheCore(t *testing.T) {
	locked := &luks.LockedError{Device: "/dev/loop3", Failures: []luks.KeyFailure{{Key: 0, Desc: "file /k", Reason: "does not match any keyslot"}}}
	for _, err := range []error{locked, fmt.Errorf("luks format /dev/loop3: none opens it: %w", luks.ErrLocked)} {
		got := markLocked(err)
		if !errors.Is(got, agent.ErrLocked) || got.Error() != err.Error() {
			t.Errorf("markLocked(%v) = %v (Is ErrLocked: %v), want ErrLocked with the same words", err, got, errors.Is(got, agent.ErrLocked))
		}
	}
	if other := errors.New("cryptsetup open: exit 1"); errors.Is(markLocked(other), agent.ErrLocked) {
		t.Error("an error that is not the driver's locked one was marked locked")
	}
}

// The manifest's keys become the driver's, in order, and the KDF its
// options: pbkdf2 only when asked for.
func TestLUKSKeysAndPBKDF(t *testing.T) {
	keys := luksKeys([]manifest.LUKS2Key{{File: "/k"}, {TPM2: &manifest.TPM2Key{PCRs: []int{7, 0}}}}, nil)
	if len(keys) != 2 || keys[0].Describe() != "file /k" || keys[1].Describe() != "tpm2 pcrs 7+0" {
		t.Errorf("keys %v", keys)
	}
	tang := func(u string) manifest.LUKS2Key {
		return manifest.LUKS2Key{Tang: &manifest.TangKey{URL: u, Thumbprint: "t"}}
	}
	tpm2 := manifest.LUKS2Key{TPM2: &manifest.TPM2Key{PCRs: []int{7}}}
	nested := luksKeys([]manifest.LUKS2Key{{Threshold: &manifest.ThresholdKey{N: 2, Keys: []manifest.LUKS2Key{
		tpm2, {Threshold: &manifest.ThresholdKey{N: 1, Keys: []manifest.LUKS2Key{tang("http://a"), tang("http://b")}}},
	}}}}, nil)
	if len(nested) != 1 || nested[0].Describe() != "threshold 2 of (tpm2 pcrs 7, threshold 1 of (tang http://a, tang http://b))" {
		t.Errorf("a nested threshold: %v", nested)
	}
	if p := luksPBKDF(manifest.PBKDFPBKDF2); p.Type != "pbkdf2" || p.Iterations != 1000 {
		t.Errorf("pbkdf2: %+v", p)
	}
	if p := luksPBKDF(manifest.PBKDFArgon2id); p.Type != "argon2id" || p.Iterations != 0 || p.MemoryKiB != 64<<10 {
		t.Errorf("argon2id: %+v, want cryptsetup's benchmarked time cost at 64 MiB", p)
	}
}
