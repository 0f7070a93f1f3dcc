// Command vmluks drives drivers/luks inside the test VM, where the kernel
// has dm-crypt, for scenarios/luks.sh. It is test-only: the agent's
// encrypt/open/close operations are what call the package in volumed.
//
//	vmluks format DEV UUID KEY...       (pbkdf2, 1000 iterations: random keys;
//	                                     VMLUKS_PBKDF=argon2id for argon2id at a
//	                                     small forced cost: 4 passes, 32 MiB)
//	vmluks open DEV NAME UUID [KEY...]  prints: path adopted key kind seconds keyseconds
//	vmluks close NAME
//	vmluks inspect DEV                  prints: found whole uuid keyslots [tokens]
//	vmluks pcr-extend PCR               extends PCR's sha256 bank of /dev/tpmrm0
//	vmluks pcr-read PCR                 prints the PCR's sha256 value in hex
//	vmluks tpm2-passphrase DEV          prints the passphrase the first unsealable
//	                                     systemd-tpm2 token gives (redirect it to a file)
//
// A KEY is a key file's path, or tpm2:PCR[+PCR...] for a TPM2 key sealed
// to those PCRs by /dev/tpmrm0. keyseconds is how long the opening key
// took to get (the TPM2 unseal); seconds is the whole open.
//
// Exit status 3 means the volume stayed locked (no key opened it), 4 that
// the device was refused as not blank.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/drivers/luks"
	"github.com/volumed/volumed/drivers/tpm2"
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

func keys(specs []string) ([]luks.Key, error) {
	ks := make([]luks.Key, len(specs))
	for i, s := range specs {
		pcrs, ok := strings.CutPrefix(s, "tpm2:")
		if !ok {
			ks[i] = luks.FileKey{Path: s}
			continue
		}
		k := luks.TPM2Key{}
		for _, p := range strings.Split(pcrs, "+") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("key %q: PCR %q is not a number", s, p)
			}
			k.PCRs = append(k.PCRs, n)
		}
		ks[i] = k
	}
	return ks, nil
}

func pcr(s string) (*tpm2.TPM, int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, 0, fmt.Errorf("PCR %q is not a number", s)
	}
	t, err := tpm2.Open(context.Background(), tpm2.DefaultDevice)
	return t, n, err
}

func run(args []string) error {
	ctx := context.Background()
	c := &luks.Client{}
	if len(args) == 0 {
		return errors.New("usage: vmluks format|open|close|inspect ARGS")
	}
	switch cmd, a := args[0], args[1:]; {
	case cmd == "format" && len(a) >= 3:
		kdf := luks.PBKDF{Type: "pbkdf2", Iterations: 1000}
		if os.Getenv("VMLUKS_PBKDF") == "argon2id" {
			kdf = luks.PBKDF{Type: "argon2id", Iterations: 4, MemoryKiB: 32 << 10}
		}
		ks, err := keys(a[2:])
		if err != nil {
			return err
		}
		return c.Format(ctx, luks.FormatOptions{Device: a[0], UUID: a[1], Keys: ks, PBKDF: kdf})
	case cmd == "open" && len(a) >= 3:
		ks, err := keys(a[3:])
		if err != nil {
			return err
		}
		t0 := time.Now()
		o, err := c.Open(ctx, luks.OpenOptions{Device: a[0], Name: a[1], UUID: a[2], Keys: ks})
		if err != nil {
			return err
		}
		kind := o.KeyKind
		if o.Adopted {
			kind = "-" // which key opened it is the caller's record
		}
		fmt.Printf("%s %t %d %s %.3f %.4f\n", o.Path, o.Adopted, o.Key, kind, time.Since(t0).Seconds(), o.KeyTime.Seconds())
		return nil
	case cmd == "tpm2-passphrase" && len(a) == 1:
		// Test-only: the scenario looks for it in /proc samples.
		return printPassphrase(a[0])
	case cmd == "pcr-extend" && len(a) == 1:
		t, n, err := pcr(a[0])
		if err != nil {
			return err
		}
		defer t.Close()
		return t.ExtendPCR(n, []byte("vmluks pcr-extend"))
	case cmd == "pcr-read" && len(a) == 1:
		t, n, err := pcr(a[0])
		if err != nil {
			return err
		}
		defer t.Close()
		v, err := t.ReadPCRs([]int{n})
		if err != nil {
			return err
		}
		fmt.Printf("%x\n", v[n])
		return nil
	case cmd == "close" && len(a) == 1:
		return c.Close(ctx, a[0])
	case cmd == "inspect" && len(a) == 1:
		in, err := luks.InspectDevice(a[0])
		if err != nil {
			return err
		}
		best, ok := in.Best()
		line := fmt.Sprintf("%t %t %s %d", in.Found(), ok, in.UUID(), best.Keyslots)
		if len(best.Tokens) > 0 {
			line += " " + strings.Join(best.Tokens, ",")
		}
		fmt.Println(line)
		return nil
	}
	return fmt.Errorf("bad arguments %q", args)
}

func printPassphrase(dev string) error {
	in, err := luks.InspectDevice(dev)
	if err != nil {
		return err
	}
	best, ok := in.Best()
	if !ok {
		return luks.ErrNoHeader
	}
	t, err := tpm2.Open(context.Background(), tpm2.DefaultDevice)
	if err != nil {
		return err
	}
	defer t.Close()
	for _, tok := range best.TokenObjects {
		tt, err := luks.ParseTPM2Token(tok.JSON)
		if err != nil {
			continue
		}
		s, err := t.Unseal(tt.Sealed)
		if err != nil {
			return err
		}
		fmt.Println(base64.StdEncoding.EncodeToString(s))
		return nil
	}
	return errors.New("no systemd-tpm2 token")
}
