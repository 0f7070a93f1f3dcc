// Command vmluks drives drivers/luks inside the test VM, where the kernel
// has dm-crypt, for scenarios/luks.sh. It is test-only: the agent's
// encrypt/open/close operations are what call the package in volumed.
//
//	vmluks format DEV UUID KEYFILE...   (pbkdf2, 1000 iterations: random keys;
//	                                     VMLUKS_PBKDF=argon2id for argon2id at a
//	                                     small forced cost: 4 passes, 32 MiB)
//	vmluks open DEV NAME UUID [KEYFILE...] prints: path adopted key kind seconds
//	vmluks close NAME
//	vmluks inspect DEV                  prints: found whole uuid keyslots
//
// Exit status 3 means the volume stayed locked (no key opened it), 4 that
// the device was refused as not blank.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/volumed/volumed/drivers/luks"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vmluks:", err)
		switch {
		case errors.Is(err, luks.ErrLocked):
			os.Exit(3)
		case errors.Is(err, luks.ErrNotBlank):
			os.Exit(4)
		}
		os.Exit(1)
	}
}

func keys(paths []string) []luks.Key {
	ks := make([]luks.Key, len(paths))
	for i, p := range paths {
		ks[i] = luks.FileKey{Path: p}
	}
	return ks
}

func run(args []string) error {
	ctx := context.Background()
	c := &luks.Client{}
	if len(args) == 0 {
		return errors.New("usage: vmluks format|open|close|inspect ...")
	}
	switch cmd, a := args[0], args[1:]; {
	case cmd == "format" && len(a) >= 3:
		kdf := luks.PBKDF{Type: "pbkdf2", Iterations: 1000}
		if os.Getenv("VMLUKS_PBKDF") == "argon2id" {
			kdf = luks.PBKDF{Type: "argon2id", Iterations: 4, MemoryKiB: 32 << 10}
		}
		return c.Format(ctx, luks.FormatOptions{Device: a[0], UUID: a[1], Keys: keys(a[2:]), PBKDF: kdf})
	case cmd == "open" && len(a) >= 3:
		t0 := time.Now()
		o, err := c.Open(ctx, luks.OpenOptions{Device: a[0], Name: a[1], UUID: a[2], Keys: keys(a[3:])})
		if err != nil {
			return err
		}
		kind := o.KeyKind
		if o.Adopted {
			kind = "-" // which key opened it is the caller's record
		}
		fmt.Printf("%s %t %d %s %.3f\n", o.Path, o.Adopted, o.Key, kind, time.Since(t0).Seconds())
		return nil
	case cmd == "close" && len(a) == 1:
		return c.Close(ctx, a[0])
	case cmd == "inspect" && len(a) == 1:
		in, err := luks.InspectDevice(a[0])
		if err != nil {
			return err
		}
		best, ok := in.Best()
		fmt.Printf("%t %t %s %d\n", in.Found(), ok, in.UUID(), best.Keyslots)
		return nil
	}
	return fmt.Errorf("bad arguments %q", args)
}
