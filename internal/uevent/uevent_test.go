package uevent

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volumed/volumed/drivers/loop"
)

// guard bounds a wait for an event the kernel has already sent, so a
// broken listener fails the test instead of hanging it.
const guard = 20 * time.Second

// attachLoop binds a real loop device to an image in a temp dir; the
// returned detach is idempotent and also runs at cleanup.
func attachLoop(t *testing.T) (name string, detach func()) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	if _, err := loop.EnsureImage(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	d, err := loop.Attach(context.Background(), loop.Options{File: img, Tag: "volumed-uevent-test"})
	if err != nil {
		t.Fatal(err)
	}
	done := false
	detach = func() {
		if done {
			return
		}
		done = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := loop.Detach(ctx, *d); err != nil {
			t.Errorf("detach %s: %v", d.Path, err)
		}
	}
	t.Cleanup(detach)
	return filepath.Base(d.Path), detach
}

// next returns the first event on l that want accepts, failing the test
// on any event that is not a block event or an overflow.
func next(t *testing.T, l *Listener, what string, want func(Event) bool) Event {
	t.Helper()
	timer := time.NewTimer(guard)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-l.C():
			if !ok {
				t.Fatalf("waiting for %s: listener closed: %v", what, l.Err())
			}
			if ev.Action != Overflow && ev.Subsystem != "block" {
				t.Fatalf("filter let through %+v", ev)
			}
			if want(ev) {
				return ev
			}
		case <-timer.C:
			t.Fatalf("waited %s for %s in vain", guard, what)
		}
	}
}

func isBlock(e Event) bool { return e.Subsystem == "block" }

func TestLoopAttachDetachEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := Listen(ctx, isBlock)
	if err != nil {
		t.Fatal(err)
	}
	name, detach := attachLoop(t)
	about := func(actions ...string) func(Event) bool {
		return func(e Event) bool { return e.DevName == name && slices.Contains(actions, e.Action) }
	}

	ev := next(t, l, "an add or change event for "+name, about("add", "change"))
	if ev.DevPath != "/devices/virtual/block/"+name || ev.DevType != "disk" || ev.Env["SEQNUM"] == "" {
		t.Errorf("attach event %+v", ev)
	}
	detach()
	next(t, l, "a change or remove event for "+name+" after detach", about("change", "remove"))

	cancel()
	for range l.C() {
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err after cancel = %v, want nil", err)
	}
}

// TestOverflowThenRecovers lets the kernel drop events for real: a
// socket buffer at the kernel's minimum and a queue of one fill up while
// the test reads nothing. The listener must say so, then keep going.
func TestOverflowThenRecovers(t *testing.T) {
	name, _ := attachLoop(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ours := func(e Event) bool { return e.DevName == name }
	l, err := listen(ctx, ours, config{rcvBuf: 1, queue: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Writing to a device's uevent file makes the kernel send a synthetic
	// event for it, with our arguments in SYNTH_ARG_*.
	uevent := filepath.Join("/sys/block", name, "uevent")
	synth := func(mark string) {
		t.Helper()
		arg := "change 8f1c5d7e-3a1b-4c2d-9e0f-123456789abc VOLUMEDMARK=" + mark
		if err := os.WriteFile(uevent, []byte(arg), 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 64 {
		synth("burst")
	}
	marked := func(mark string) func(Event) bool {
		return func(e Event) bool { return e.Env["SYNTH_ARG_VOLUMEDMARK"] == mark }
	}
	burst := 0
	next(t, l, "an overflow event", func(e Event) bool {
		if marked("burst")(e) {
			burst++
		}
		return e.Action == Overflow
	})
	if burst >= 64 {
		t.Fatalf("overflow reported, but all %d events arrived", burst)
	}
	// Events still queued from the burst may overflow the tiny buffer
	// again; each loss is reported, and a reading consumer gets through.
	for try := range 10 {
		mark := "after" + strconv.Itoa(try)
		synth(mark)
		ev := next(t, l, "the event sent after the overflow, or another overflow", func(e Event) bool {
			return marked(mark)(e) || e.Action == Overflow
		})
		if ev.Action != Overflow {
			return
		}
	}
	t.Fatal("every event after the first overflow was lost")
}

func TestCancelClosesWithoutEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l, err := Listen(ctx, func(Event) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for ev := range l.C() {
		t.Errorf("filtered-out event delivered: %+v", ev)
	}
	if l.Err() != nil {
		t.Errorf("Err = %v", l.Err())
	}
}

const addLoop = "add@/devices/virtual/block/loop7\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop7\x00" +
	"SUBSYSTEM=block\x00MAJOR=7\x00MINOR=7\x00DEVNAME=loop7\x00DEVTYPE=disk\x00DISKSEQ=42\x00SEQNUM=3311\x00"

func TestParse(t *testing.T) {
	ev, err := Parse([]byte(addLoop))
	if err != nil {
		t.Fatal(err)
	}
	want := Event{Action: "add", DevPath: "/devices/virtual/block/loop7", Subsystem: "block", DevName: "loop7", DevType: "disk",
		Env: map[string]string{"ACTION": "add", "DEVPATH": "/devices/virtual/block/loop7", "SUBSYSTEM": "block",
			"MAJOR": "7", "MINOR": "7", "DEVNAME": "loop7", "DEVTYPE": "disk", "DISKSEQ": "42", "SEQNUM": "3311"}}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("Parse = %+v\nwant %+v", ev, want)
	}

	udev := "libudev\x00\xfe\xed\xca\xfe" + strings.Repeat("\x00", 32) + "ACTION=add\x00"
	if _, err := Parse([]byte(udev)); !errors.Is(err, ErrUdevFormat) {
		t.Errorf("udev message: err = %v, want ErrUdevFormat", err)
	}
	for msg, want := range map[string]string{
		"":                            "is not action@/devpath",
		"add":                         "is not action@/devpath",
		"@/devices/x\x00ACTION=\x00":  "is not action@/devpath",
		"add@devices\x00":             "is not action@/devpath",
		"add@/d\x00ACTION=add\x00bad": `field "bad" is not KEY=VALUE`,
		"add@/d\x00=x\x00":            `field "=x" is not KEY=VALUE`,
		"add@/d\x00DEVPATH=/d\x00":    "disagree with the header",
		"add@/d\x00ACTION=remove\x00DEVPATH=/d\x00": "disagree with the header",
	} {
		if _, err := Parse([]byte(msg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", msg, err, want)
		}
	}
}

// format is Parse's inverse, for the round trip below.
func format(ev Event) []byte {
	var b bytes.Buffer
	b.WriteString(ev.Action + "@" + ev.DevPath + "\x00")
	for _, k := range slices.Sorted(maps.Keys(ev.Env)) {
		b.WriteString(k + "=" + ev.Env[k] + "\x00")
	}
	return b.Bytes()
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(addLoop))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Parse(b)
		if err != nil {
			if !reflect.DeepEqual(ev, Event{}) {
				t.Fatalf("error %v with event %+v", err, ev)
			}
			return
		}
		if ev.Action == "" || !strings.HasPrefix(ev.DevPath, "/") {
			t.Fatalf("accepted a malformed event %+v", ev)
		}
		again, err := Parse(format(ev))
		if err != nil || !reflect.DeepEqual(again, ev) {
			t.Fatalf("round trip of %+v gave %+v, %v", ev, again, err)
		}
	})
}
