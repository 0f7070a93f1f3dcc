package decide

import (
	"testing"

	"github.com/volumed/volumed/store/record"
)

func TestMayRelease(t *testing.T) {
	loop := record.Attachment{Kind: "loop", Device: "/dev/loop1", Owned: true}
	sess := func(owned, pinned bool) record.Attachment {
		return record.Attachment{Kind: "iscsi", Device: "/dev/sdb", Session: "iqn.t", Owned: owned, Pinned: pinned}
	}
	rider := record.Attachment{Kind: "iscsi", Device: "/dev/sdc", Session: "iqn.t"}
	elsewhere := record.Attachment{Kind: "iscsi", Device: "/dev/sdd", Session: "iqn.other", Owned: true}
	for _, tc := range []struct {
		name         string
		at           record.Attachment
		others       []record.Attachment
		sessionOwned bool
		want         bool
	}{
		{"loop device we made", loop, nil, false, true},
		{"loop device beside other loop devices", loop, []record.Attachment{{Kind: "loop", Device: "/dev/loop2", Owned: true}}, false, true},
		{"device we did not make", record.Attachment{Kind: "device", Device: "/dev/sda"}, nil, false, false},
		{"session we made, last rider", sess(true, false), nil, false, true},
		{"session we made, another volume rides it", sess(true, false), []record.Attachment{rider}, true, false},
		{"session we made, others on other sessions", sess(true, false), []record.Attachment{elsewhere}, true, true},
		{"joiner's record not owned, session ours, last rider", sess(false, false), nil, true, true},
		{"session another tool made", sess(false, false), nil, false, false},
		{"booted from, owned", sess(true, true), nil, true, false},
		{"booted from, not owned", sess(false, true), nil, true, false},
		{"sessionOwned means nothing without a session", record.Attachment{Kind: "device", Device: "/dev/sda"}, nil, true, false},
	} {
		if got := MayRelease(tc.at, tc.others, tc.sessionOwned); got != tc.want {
			t.Errorf("%s: MayRelease = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOwns(t *testing.T) {
	ours := []record.Attachment{{Kind: "iscsi", Session: "s1", Owned: true}}
	theirs := []record.Attachment{{Kind: "iscsi", Session: "s1"}}
	loneOwned := []record.Attachment{{Kind: "loop", Owned: true}}
	cases := []struct {
		name   string
		c      Claim
		others []record.Attachment
		want   bool
	}{
		{"volumed made it", Claim{Made: true}, nil, true},
		{"volumed made it, but the host booted from it", Claim{Made: true, Pinned: true}, nil, false},
		{"found in place (another tool's session, a disk)", Claim{Reusable: true, Session: "s1"}, nil, false},
		{"found where a crash caught volumed attaching", Claim{Reusable: true, Session: "s1", AttachInterrupted: true}, nil, true},
		{"a loop device volumed did not make, even after a crash", Claim{AttachInterrupted: true}, nil, false},
		{"rides a session volumed made for another volume", Claim{Reusable: true, Session: "s1", SessionMade: true}, nil, true},
		{"rides a session another volume's record owns", Claim{Reusable: true, Session: "s1"}, ours, true},
		{"rides a session nobody of volumed's made", Claim{Reusable: true, Session: "s1"}, theirs, false},
		{"no session: another volume's ownership says nothing", Claim{Reusable: true}, loneOwned, false},
		{"pinned, riding our session", Claim{Reusable: true, Session: "s1", Pinned: true, SessionMade: true}, ours, false},
	}
	for _, c := range cases {
		if got := Owns(c.c, c.others); got != c.want {
			t.Errorf("%s: Owns = %v, want %v", c.name, got, c.want)
		}
	}
}
