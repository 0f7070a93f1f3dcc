package logwrites

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// flagged builds a log of one-block writes, flushes and marks from a
// string: w a write, W a FUA write, F a flush, X a flush with FUA data,
// d a discard, m a mark.
func flagged(t *testing.T, s string) *Log {
	t.Helper()
	w := newLogWriter(512)
	for i, c := range s {
		switch c {
		case 'w':
			w.write(uint64(i), fill(512, 1, 'w'), 0)
		case 'W':
			w.write(uint64(i), fill(512, 1, 'W'), FlagFUA)
		case 'F':
			w.flush()
		case 'X':
			w.write(uint64(i), fill(512, 1, 'X'), FlagFlush|FlagFUA)
		case 'd':
			w.discard(uint64(i), 1)
		case 'm':
			w.mark("m")
		}
	}
	return parse(t, w.bytes())
}

func TestDurableAndVolatile(t *testing.T) {
	cases := []struct {
		log      string
		end      int
		durable  int
		volatile []int
	}{
		{"ww", 2, 0, []int{0, 1}},
		{"wwF", 3, 2, nil},
		{"wwFw", 4, 2, []int{3}},
		{"wwFwWd", 6, 2, []int{3, 5}}, // the FUA write is durable, the discard is not
		{"wwFwmw", 6, 2, []int{3, 5}},
		{"wFwFww", 3, 1, []int{2}}, // at end 3 the second flush has not completed
		{"wFwFww", 6, 3, []int{4, 5}},
		{"wwXw", 4, 2, []int{3}}, // a flush with FUA data: its data is durable too
		{"", 0, 0, nil},
	}
	for _, c := range cases {
		l := flagged(t, c.log)
		if d := l.Durable(c.end); d != c.durable {
			t.Errorf("%q at %d: durable %d, want %d", c.log, c.end, d, c.durable)
		}
		if v := l.Volatile(c.end); !slices.Equal(v, c.volatile) {
			t.Errorf("%q at %d: volatile %v, want %v", c.log, c.end, v, c.volatile)
		}
	}
}

func TestPoints(t *testing.T) {
	cases := []struct {
		log  string
		ends []int
	}{
		{"wwFwWmw", []int{3, 5, 7}},
		{"wwF", []int{3}},
		{"", []int{0}},
		{"wXw", []int{2, 3}},
	}
	for _, c := range cases {
		var ends []int
		for _, s := range flagged(t, c.log).Points() {
			if len(s.Drop) != 0 {
				t.Errorf("%q: a point drops %v", c.log, s.Drop)
			}
			ends = append(ends, s.End)
		}
		if !slices.Equal(ends, c.ends) {
			t.Errorf("%q: points end at %v, want %v", c.log, ends, c.ends)
		}
	}
}

// TestSubsets checks that every sampled state is one a power cut could
// leave (it drops only volatile writes, and drops some) and that a seed
// gives the same states again.
func TestSubsets(t *testing.T) {
	l := flagged(t, "wwwFwWwdwmwFwwXwwwww")
	a := l.Subsets(rand.New(rand.NewPCG(7, 0)), 40)
	if len(a) < 20 {
		t.Fatalf("%d subsets of 40 asked; the log has many more", len(a))
	}
	seen := map[string]bool{}
	for _, s := range a {
		vol := l.Volatile(s.End)
		if len(s.Drop) == 0 {
			t.Errorf("%v drops nothing", s)
		}
		for _, d := range s.Drop {
			if !slices.Contains(vol, d) {
				t.Errorf("%v drops entry %d, which is not volatile at %d (%v)", s, d, s.End, vol)
			}
		}
		if seen[s.String()] {
			t.Errorf("%v twice", s)
		}
		seen[s.String()] = true
	}
	b := l.Subsets(rand.New(rand.NewPCG(7, 0)), 40)
	if !slices.EqualFunc(a, b, func(x, y State) bool { return x.String() == y.String() }) {
		t.Error("the same seed gave other subsets")
	}
	if s := flagged(t, "WWFW").Subsets(rand.New(rand.NewPCG(1, 0)), 5); len(s) != 0 {
		t.Errorf("a log with nothing volatile gave subsets %v", s)
	}
}

// TestSubsetReplay: the state's image holds every durable write and none
// it dropped.
func TestSubsetReplay(t *testing.T) {
	l := flagged(t, "wwFwWw")
	st := State{End: 6, Drop: []int{3}}
	img := image(t, 6*512)
	if err := l.Replay(img, 0, st.End, st.Dropped()); err != nil {
		t.Fatal(err)
	}
	// Entry i writes block i: 0 and 1 durable, 3 dropped, 4 FUA, 5 kept.
	if got := blocks(readAll(t, img), 512); got != "ww..Ww" {
		t.Errorf("image %s, want ww..Ww", got)
	}
}

func TestThinAndOrder(t *testing.T) {
	var s []State
	for i := range 10 {
		s = append(s, State{End: 10 - i})
	}
	thin := Thin(s, 3)
	if len(thin) != 3 || thin[2].End != 1 {
		t.Errorf("thin to 3: %v, want 3 with the last kept", thin)
	}
	if got := Thin(s, 0); len(got) != 10 {
		t.Errorf("thin to 0 (no bound) kept %d", len(got))
	}
	Order(s)
	if !slices.IsSortedFunc(s, func(a, b State) int { return a.End - b.End }) {
		t.Errorf("not ordered: %v", s)
	}
}

// FuzzRead: no input makes the parser panic, allocate beyond the input's
// size, or list an entry whose data is not inside the log.
func FuzzRead(f *testing.F) {
	f.Add(newLogWriter(512).write(1, fill(512, 2, 'a'), 0).flush().mark("m").discard(0, 4).bytes())
	f.Add(newLogWriter(4096).write(0, fill(4096, 1, 'b'), FlagFUA|FlagFlush).bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for _, e := range l.Entries {
			d, err := l.Data(e)
			if err != nil {
				t.Fatalf("entry %v listed but its data unreadable: %v", e, err)
			}
			if e.Writes() && !e.Discard() && int64(len(d)) != int64(e.Sectors)*l.BlockSize {
				t.Fatalf("entry %v: %d bytes of data", e, len(d))
			}
		}
		_ = l.Points()
		_ = l.Subsets(rand.New(rand.NewPCG(1, 2)), 4)
	})
}
