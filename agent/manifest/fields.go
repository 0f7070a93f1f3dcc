package manifest

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/volumed/volumed/internal/secret"
	"github.com/volumed/volumed/internal/size"
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func checkName(name string) string {
	switch {
	case name == "":
		return "required"
	case len(name) > 63:
		return fmt.Sprintf("must be at most 63 characters, got %d", len(name))
	case !nameRE.MatchString(name):
		return fmt.Sprintf("must be lowercase letters, digits and '-', starting and ending with a letter or digit, got %q", name)
	}
	return ""
}

// ReservedPrefix starts the names of the volumes the CSI node service
// makes; a manifest may not declare one, so neither source can take
// over the other's volume.
const ReservedPrefix = "csi-"

// CheckName says why name may not be a volume's name ("" if it may).
func CheckName(name string) string { return checkName(name) }

func (v *validator) duration(field, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		v.report(field, fmt.Sprintf("must be a duration such as 30s or 10m, got %q", s))
		return 0
	}
	return d
}

func (v *validator) size(field, s string) int64 {
	if s == "" {
		v.report(field, "required")
		return 0
	}
	n, err := size.Parse(s)
	if err != nil {
		v.report(field, err.Error())
		return 0
	}
	if n <= 0 {
		v.report(field, fmt.Sprintf("must be more than 0, got %q", s))
		return 0
	}
	return n
}

// secretFile checks a file named as holding a secret. A file that does not
// exist yet is accepted (provisioning may write it after the manifest;
// the attach waits and says so); one that anybody but root could read is
// refused, so the manifest never works with a leaked secret.
func (v *validator) secretFile(field, p string, required bool) {
	if p == "" && !required {
		return
	}
	if r := checkPath(p); r != "" {
		v.report(field, r)
		return
	}
	if !v.opts.CheckOwnership {
		return
	}
	if _, err := os.Lstat(p); err != nil {
		return
	}
	if err := secret.Check(p); err != nil {
		v.report(field, strings.TrimPrefix(err.Error(), "secret file "+p+": "))
	}
}

func checkHostPort(s string) string {
	if s == "" {
		return "required (host:port)"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return fmt.Sprintf("must be host:port, got %q", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port must be 1 to 65535, got %q", port)
	}
	return ""
}

// ParseMode parses a directory mode written as octal digits, e.g. "0750".
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) < 3 || len(s) > 4 || m > 0o7777 {
		return 0, fmt.Errorf("must be an octal mode like \"0750\", got %q", s)
	}
	return uint32(m), nil
}
