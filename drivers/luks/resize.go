package luks

import (
	"context"
	"fmt"
)

// Resize makes the open mapping name fill its device again, after the
// device grew. LUKS2 keeps its volume key in the kernel keyring, so
// cryptsetup wants a key that opens the header (on device) to resize:
// keys are tried in order, as Open tries them, and none opening it is a
// *LockedError. The header is not written.
func (c *Client) Resize(ctx context.Context, device, name string, keys []Key) error {
	m, found, err := c.Mapping(name)
	if err != nil {
		return fmt.Errorf("luks resize %s: %w", name, err)
	}
	if !found {
		return fmt.Errorf("luks resize %s: no such mapping", name)
	}
	if !m.Crypt() {
		return fmt.Errorf("luks resize %s: DM uuid %q: %w", name, m.UUID, ErrMappingTaken)
	}
	locked := &LockedError{Device: device}
	for i, k := range keys {
		v, err := k.Material(ctx)
		if err != nil {
			locked.Failures = append(locked.Failures, keyFailure(i, k, err))
			continue
		}
		code, err := c.run(ctx, []string{"resize", "--key-file=/proc/self/fd/3", "--", name}, v)
		if code == exitNoKey {
			locked.Failures = append(locked.Failures, KeyFailure{Key: i, Desc: k.Describe(), Reason: "does not match any keyslot"})
			continue
		}
		if err != nil {
			return fmt.Errorf("luks resize %s with key %d (%s): %w", name, i, k.Describe(), err)
		}
		return nil
	}
	return locked
}
