package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/volumed/volumed/agent/api"
)

// cmdRecoveryKey is `volumed recovery-key NAME`: the running agent
// enrols a new recovery key in the volume's header, and this prints it,
// the only time it is shown.
func cmdRecoveryKey(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("recovery-key", flag.ContinueOnError)
	socket := fs.String("socket", defaultSocket, "unix socket of the running agent")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) != 1 {
		return exitError{code: 2, msg: "usage: volumed recovery-key NAME"}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	key, err := api.NewClient(*socket).RecoveryKey(ctx, names[0])
	if err != nil {
		return fmt.Errorf("recovery key for %s: %w", names[0], err)
	}
	fmt.Fprintf(stdout, "A recovery key is enrolled in the LUKS2 header of volume %s. It is shown this once and kept nowhere: write it down now.\n\n    %s\n\nType it where the volume's passphrase is asked for (cryptsetup open, systemd-cryptsetup).\n", names[0], key)
	return nil
}
