package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A scrape hands its heap back after answering, and a scraper polling
// faster than the interval does not force a collection each time.
func TestScrapeReleasesHeapAtMostOncePerInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newHeapRelease(func() time.Time { return now })
	releases := 0
	answered := false
	h.release = func() {
		if !answered {
			t.Error("heap released before the scrape was answered")
		}
		releases++
	}
	srv := h.after(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		answered = true
		_, _ = w.Write([]byte("volumed_build_info 1\n"))
	}))
	scrape := func() {
		answered = false
		srv.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	}
	for i, c := range []struct {
		after time.Duration
		want  int
	}{
		{0, 1},           // the first scrape releases
		{time.Second, 1}, // too soon
		{scrapeRelease - 2*time.Second, 1},
		{time.Second, 2}, // an interval since the last release
		{scrapeRelease, 3},
	} {
		now = now.Add(c.after)
		scrape()
		if releases != c.want {
			t.Fatalf("scrape %d: %d releases, want %d", i, releases, c.want)
		}
	}
}
