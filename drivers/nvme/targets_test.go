package nvme

import (
	"context"
	"testing"
)

const (
	nqnData = "nqn.2026-01.com.example:data"
	nqnLogs = "nqn.2026-01.com.example:logs"
	hostNQN = "nqn.2014-08.org.nvmexpress:uuid:8f3b7c1e-2d4a-4e5b-9c6d-7e8f9a0b1c2d"
	hostID  = "8f3b7c1e-2d4a-4e5b-9c6d-7e8f9a0b1c2d"
)

var tgtData = Target{Transport: "tcp", Address: "192.0.2.11", Port: 4420, NQN: nqnData}

// connectOne connects nsid 1 of tgtData, the only namespace of a fake
// target without multipath.
func connectOne(t *testing.T) (*fakeFabrics, *Client, Namespace) {
	t.Helper()
	f := newFake(t, false)
	f.namespaces[nqnData] = []fakeNS{{nsid: 1, sectors: 8}}
	c := f.client()
	ns, err := c.Connect(context.Background(), Options{Target: tgtData, Namespace: 1})
	if err != nil {
		t.Fatal(err)
	}
	return f, c, ns
}
