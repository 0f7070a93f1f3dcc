// Package nvme is the `nvme` source kind: a namespace of an NVMe over
// Fabrics subsystem (drivers/nvme), the controller shared by the volumes
// on one subsystem and address and disconnected by the last one.
package nvme

import (
	"fmt"
	"strings"
	"time"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	nvmedrv "github.com/volumed/volumed/drivers/nvme"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "nvme"

// Source is `source.nvme`: a namespace of an NVMe over Fabrics subsystem;
// the controller is shared with the other volumes on it.
type Source struct {
	Transport string `yaml:"transport" json:"transport"`
	Address   string `yaml:"address" json:"address"`
	Port      int    `yaml:"port,omitempty" json:"port,omitempty"`
	NQN       string `yaml:"nqn" json:"nqn"`
	Namespace int    `yaml:"namespace" json:"namespace"`
	// Durations as written ("30m", "10s"); empty: the driver's defaults,
	// chosen to ride out a network flap. The D fields hold the parsed values.
	CtrlLossTimeout   string        `yaml:"ctrlLossTimeout,omitempty" json:"ctrlLossTimeout,omitempty"`
	ReconnectDelay    string        `yaml:"reconnectDelay,omitempty" json:"reconnectDelay,omitempty"`
	KeepAliveTimeout  string        `yaml:"keepAliveTimeout,omitempty" json:"keepAliveTimeout,omitempty"`
	CtrlLossTimeoutD  time.Duration `yaml:"-" json:"-"`
	ReconnectDelayD   time.Duration `yaml:"-" json:"-"`
	KeepAliveTimeoutD time.Duration `yaml:"-" json:"-"`
	NrIOQueues        int           `yaml:"nrIOQueues,omitempty" json:"nrIOQueues,omitempty"`
	// DHCHAPSecretFile names a file (root-owned, 0600) holding the
	// DH-HMAC-CHAP host key ("DHHC-1:..."); the key is never written in a manifest.
	DHCHAPSecretFile string `yaml:"dhchapSecretFile,omitempty" json:"dhchapSecretFile,omitempty"`
}

// Kind describes the nvme source kind.
type Kind struct{}

func (Kind) Name() string        { return Name }
func (Kind) Traits() kind.Traits { return kind.Traits{AwaitsDisk: true, Network: true} }
func (Kind) New() any            { return new(Source) }

// Needs: no nvme-cli (the driver writes /dev/nvme-fabrics and reads
// sysfs), the fabrics module and the one of the source's transport.
func (Kind) Needs(spec any) hostcheck.Needs {
	n := hostcheck.Needs{Modules: []hostcheck.Module{{Name: "nvme-fabrics", What: "NVMe over Fabrics", Dev: "nvme-fabrics"}}}
	if s, ok := spec.(*Source); ok && s.Transport != "" {
		n.Modules = append(n.Modules, hostcheck.Module{Name: "nvme-" + s.Transport, What: "NVMe/" + strings.ToUpper(s.Transport)})
	}
	return n
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	n := spec.(*Source)
	switch n.Transport {
	case "tcp", "rdma":
	case "":
		c.Report("transport", "required (tcp or rdma)")
	default:
		c.Report("transport", fmt.Sprintf("must be tcp or rdma, got %q", n.Transport))
	}
	if n.Address == "" {
		c.Report("address", "required")
	}
	switch {
	case n.Port == 0:
		n.Port = 4420
	case n.Port < 0 || n.Port > 65535:
		c.Report("port", fmt.Sprintf("must be 1 to 65535, got %d", n.Port))
	}
	switch {
	case n.NQN == "":
		c.Report("nqn", "required")
	case !strings.HasPrefix(n.NQN, "nqn."):
		c.Report("nqn", fmt.Sprintf(`must start with "nqn.", got %q`, n.NQN))
	}
	if n.Namespace < 1 {
		c.Report("namespace", fmt.Sprintf("must be 1 or more, got %d", n.Namespace))
	}
	n.CtrlLossTimeoutD = c.Duration("ctrlLossTimeout", n.CtrlLossTimeout)
	n.ReconnectDelayD = c.Duration("reconnectDelay", n.ReconnectDelay)
	n.KeepAliveTimeoutD = c.Duration("keepAliveTimeout", n.KeepAliveTimeout)
	if n.NrIOQueues < 0 {
		c.Report("nrIOQueues", fmt.Sprintf("must be 0 (the kernel's default) or more, got %d", n.NrIOQueues))
	}
	c.SecretFile("dhchapSecretFile", n.DHCHAPSecretFile, false)
	return manifest.Caps{
		Key: fmt.Sprintf("nvme %s %s:%d %s namespace %d", n.Transport, n.Address, n.Port, n.NQN, n.Namespace),
		Claims: []manifest.Claim{{
			Key:  fmt.Sprintf("%s\x00%d", n.NQN, n.Namespace),
			What: fmt.Sprintf("NVMe namespace %d of %s", n.Namespace, n.NQN),
		}},
	}
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "transport", Check: kind.Enum{"tcp", "rdma"}},
		{Type: "Source", Prop: "port", Check: kind.Port},
		{Type: "Source", Prop: "nqn", Check: kind.NQN},
		{Type: "Source", Prop: "namespace", Check: kind.Min(1)},
	}
}

func (Kind) Attacher(env kind.Env) agent.Attacher {
	return attacher{c: &nvmedrv.Client{}, host: env.Host, boot: env.Boot}
}
