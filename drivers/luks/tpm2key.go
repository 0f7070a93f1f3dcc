package luks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/volumed/volumed/internal/secret"
)

// DefaultTPM is the kernel's TPM2 resource manager, which lets several
// programs use the TPM at once.
const DefaultTPM = "/dev/tpmrm0"

// ErrNoTPM2 is returned while TPM2 sealing is not built in.
var ErrNoTPM2 = errors.New("tpm2 keys are not supported yet")

// TPM2Key is a random volume key sealed by the host's TPM2 to the values
// of PCRs; the sealed blob lives in a systemd-tpm2 token on the LUKS2
// header, so the disk carries what it needs to be opened on this host.
type TPM2Key struct {
	Device string // "" for DefaultTPM
	PCRs   []int
}

func (k TPM2Key) Kind() string { return "tpm2" }

func (k TPM2Key) Describe() string {
	p := make([]string, len(k.PCRs))
	for i, n := range k.PCRs {
		p[i] = fmt.Sprint(n)
	}
	return "tpm2 pcrs " + strings.Join(p, "+")
}

func (k TPM2Key) Material(context.Context) (secret.Value, error) {
	return secret.Value{}, ErrNoTPM2
}
