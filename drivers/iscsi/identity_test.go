package iscsi

import "testing"

func TestIdentityRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		lun  int
		want string
	}{
		{Target{Portal: "192.0.2.10", IQN: "iqn.2024-01.io.example:data"}, 0, "iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260:lun0"},
		{Target{Portal: "192.0.2.10:3261", IQN: "iqn.2024-01.io.example:data"}, 12, "iscsi:iqn.2024-01.io.example:data@192.0.2.10:3261:lun12"},
		{Target{Portal: "[2001:DB8::1]:3260", IQN: "iqn.2024-01.io.example:a:lun3"}, 3, "iscsi:iqn.2024-01.io.example:a:lun3@[2001:db8::1]:3260:lun3"},
	} {
		id := Identity(tc.t, tc.lun)
		if id != tc.want {
			t.Errorf("Identity(%+v, %d) = %q, want %q", tc.t, tc.lun, id, tc.want)
		}
		got, lun, err := ParseIdentity(id)
		if err != nil || got.Key() != tc.t.Key() || lun != tc.lun {
			t.Errorf("ParseIdentity(%q) = %+v, %d, %v; want %+v, %d", id, got, lun, err, tc.t, tc.lun)
		}
	}
	for _, bad := range []string{
		"", "iscsi:", "nvme:iqn.2024-01.io.example:data@192.0.2.10:3260:lun0",
		"iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260",
		"iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260:lun",
		"iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260:lun-1",
		"iscsi:iqn.2024-01.io.example:data@192.0.2.10:3260:lun1x",
		"iscsi:iqn.2024-01.io.example:data:lun0",
		"iscsi:iqn.2024-01.io.example:data@host.example:3260:lun0",
		"iscsi:not-an-iqn@192.0.2.10:3260:lun0",
	} {
		if tg, lun, err := ParseIdentity(bad); err == nil {
			t.Errorf("ParseIdentity(%q) = %+v, %d; want an error", bad, tg, lun)
		}
	}
}
