package decide

import (
	"testing"

	"github.com/volumed/volumed/store/record"
)

func TestMayRelease(t *testing.T) {
	loop := record.Attachment{Driver: "loop", Device: "/dev/loop1", Owned: true}
	sess := func(owned, pinned bool) record.Attachment {
		return record.Attachment{Driver: "iscsi", Device: "/dev/sdb", Session: "iqn.t", Owned: owned, Pinned: pinned}
	}
	rider := record.Attachment{Driver: "iscsi", Device: "/dev/sdc", Session: "iqn.t"}
	elsewhere := record.Attachment{Driver: "iscsi", Device: "/dev/sdd", Session: "iqn.other", Owned: true}
	for _, tc := range []struct {
		name         string
		at           record.Attachment
		others       []record.Attachment
		sessionOwned bool
		want         bool
	}{
		{"loop device we made", loop, nil, false, true},
		{"loop device beside other loop devices", loop, []record.Attachment{{Driver: "loop", Device: "/dev/loop2", Owned: true}}, false, true},
		{"device we did not make", record.Attachment{Driver: "device", Device: "/dev/sda"}, nil, false, false},
		{"session we made, last rider", sess(true, false), nil, false, true},
		{"session we made, another volume rides it", sess(true, false), []record.Attachment{rider}, true, false},
		{"session we made, others on other sessions", sess(true, false), []record.Attachment{elsewhere}, true, true},
		{"joiner's record not owned, session ours, last rider", sess(false, false), nil, true, true},
		{"session another tool made", sess(false, false), nil, false, false},
		{"booted from, owned", sess(true, true), nil, true, false},
		{"booted from, not owned", sess(false, true), nil, true, false},
		{"sessionOwned means nothing without a session", record.Attachment{Driver: "device", Device: "/dev/sda"}, nil, true, false},
	} {
		if got := MayRelease(tc.at, tc.others, tc.sessionOwned); got != tc.want {
			t.Errorf("%s: MayRelease = %v, want %v", tc.name, got, tc.want)
		}
	}
}
