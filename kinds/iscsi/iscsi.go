// Package iscsi is the `iscsi` source kind: a LUN of an iSCSI target,
// logged in through iscsiadm (drivers/iscsi), the session shared by the
// volumes on one target and logged out by the last one.
package iscsi

import (
	"fmt"
	"strings"
	"time"

	"github.com/volumed/volumed/agent"
	"github.com/volumed/volumed/agent/manifest"
	iscsidrv "github.com/volumed/volumed/drivers/iscsi"
	"github.com/volumed/volumed/internal/hostcheck"
	"github.com/volumed/volumed/kinds/kind"
)

// Name is the manifest key and the driver's name.
const Name = "iscsi"

// Source is `source.iscsi`: a LUN of an iSCSI target; the session is
// shared with the other volumes on the target.
type Source struct {
	Portal string `yaml:"portal" json:"portal"`
	IQN    string `yaml:"iqn" json:"iqn"`
	LUN    int    `yaml:"lun" json:"lun"`
	CHAP   *CHAP  `yaml:"chap,omitempty" json:"chap,omitempty"`
	// ReplacementTimeout is how long I/O is held while the session is
	// down before it fails ("120s"; empty: the driver's default).
	ReplacementTimeout  string        `yaml:"replacementTimeout,omitempty" json:"replacementTimeout,omitempty"`
	ReplacementTimeoutD time.Duration `yaml:"-" json:"-"`
}

// CHAP secrets are named by file only (root-owned, mode 0600 or stricter),
// never written in a manifest.
type CHAP struct {
	Username     string `yaml:"username" json:"username"`
	PasswordFile string `yaml:"passwordFile" json:"passwordFile"`
	// Mutual CHAP: the target proves itself to the initiator too.
	MutualUsername     string `yaml:"mutualUsername,omitempty" json:"mutualUsername,omitempty"`
	MutualPasswordFile string `yaml:"mutualPasswordFile,omitempty" json:"mutualPasswordFile,omitempty"`
}

// Kind describes the iscsi source kind.
type Kind struct{}

func (Kind) Name() string        { return Name }
func (Kind) Traits() kind.Traits { return kind.Traits{AwaitsDisk: true, Network: true} }
func (Kind) New() any            { return new(Source) }
func (Kind) Needs(any) hostcheck.Needs {
	return hostcheck.Needs{
		Programs: []hostcheck.Program{{Name: "iscsiadm", Why: "logs in to iSCSI targets", Package: "open-iscsi"}},
		Modules:  []hostcheck.Module{{Name: "iscsi_tcp", What: "iSCSI"}},
	}
}

func (Kind) Check(spec any, c *manifest.Check) manifest.Caps {
	s := spec.(*Source)
	c.HostPort("portal", s.Portal)
	switch {
	case s.IQN == "":
		c.Report("iqn", "required")
	case !strings.HasPrefix(s.IQN, "iqn.") && !strings.HasPrefix(s.IQN, "eui.") && !strings.HasPrefix(s.IQN, "naa."):
		c.Report("iqn", fmt.Sprintf(`must start with "iqn.", "eui." or "naa.", got %q`, s.IQN))
	}
	if s.LUN < 0 {
		c.Report("lun", fmt.Sprintf("must be 0 or more, got %d", s.LUN))
	}
	if ch := s.CHAP; ch != nil {
		if ch.Username == "" {
			c.Report("chap.username", "required")
		}
		c.SecretFile("chap.passwordFile", ch.PasswordFile, true)
		switch {
		case ch.MutualUsername != "" && ch.MutualPasswordFile == "":
			c.Report("chap.mutualPasswordFile", "required with mutualUsername")
		case ch.MutualUsername == "" && ch.MutualPasswordFile != "":
			c.Report("chap.mutualUsername", "required with mutualPasswordFile")
		case ch.MutualPasswordFile != "":
			c.SecretFile("chap.mutualPasswordFile", ch.MutualPasswordFile, true)
		}
	}
	s.ReplacementTimeoutD = c.Duration("replacementTimeout", s.ReplacementTimeout)
	return manifest.Caps{
		Key: fmt.Sprintf("iscsi %s %s lun %d", s.Portal, s.IQN, s.LUN),
		Claims: []manifest.Claim{{
			Key:  fmt.Sprintf("%s\x00%s\x00%d", s.Portal, s.IQN, s.LUN),
			What: fmt.Sprintf("iSCSI LUN %d of %s at %s", s.LUN, s.IQN, s.Portal),
		}},
	}
}

func (Kind) Rules() []kind.Rule {
	return []kind.Rule{
		{Type: "Source", Prop: "portal", Check: kind.Portal},
		{Type: "Source", Prop: "iqn", Check: kind.IQN},
		{Type: "Source", Prop: "lun", Check: kind.Min(0)},
		{Type: "Source", Prop: "", Check: kind.Optional("lun")}, // 0 when left out
		{Type: "CHAP", Prop: "passwordFile", Check: kind.Abs},
	}
}

func (Kind) Attacher(env kind.Env) agent.Attacher {
	return attacher{c: &iscsidrv.Client{}, host: env.Host, boot: env.Boot}
}
