package testtool

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/volumed/volumed/internal/testtool/toolscan"
)

// TestRegistryIsWhatTheSuiteRuns: every program the module's code runs
// (a test, or a driver a test exercises) is in the registry, and every
// entry of the registry is run somewhere. A new tool that a test calls
// fails here until it is registered with its package, so the
// fresh-machine test (test/os) checks it too.
func TestRegistryIsWhatTheSuiteRuns(t *testing.T) {
	uses, err := toolscan.Dir(ModuleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) < 50 {
		t.Fatalf("the scan found %d uses of programs; it has stopped seeing the suite's calls", len(uses))
	}
	used := map[string]bool{}
	var unknown []string
	for _, u := range uses {
		used[u.Name] = true
		if _, ok := Lookup(u.Name); !ok {
			unknown = append(unknown, u.Name+" ("+u.At+")")
		}
	}
	if len(unknown) > 0 {
		t.Errorf("programs the code runs that internal/testtool/tools.go lacks (add each with its Debian package):\n  %s", strings.Join(unknown, "\n  "))
	}
	var stale []string
	for _, tl := range Tools() {
		if !used[tl.Name] {
			stale = append(stale, tl.Name)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("registry entries nothing runs any more (remove them): %v", stale)
	}
	for _, l := range Libraries() {
		if _, ok := Lookup(l.For); !ok {
			t.Errorf("library %s is for %s, which is not in the registry", l.Soname, l.For)
		}
	}
}

func TestRegistryEntriesAreWhole(t *testing.T) {
	seen := map[string]bool{}
	for _, tl := range Tools() {
		if seen[tl.Name] {
			t.Errorf("%s is registered twice", tl.Name)
		}
		seen[tl.Name] = true
		if tl.Package == "" && tl.Where != Prerequisite {
			t.Errorf("%s has no Debian package", tl.Name)
		}
	}
}

func TestNeedRefusesAnUnregisteredProgram(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Built at run time, so that the registry test's scan passes it by.
		Need(ft, "Debian: nothing", strings.Join([]string{"volumed", "no-such-tool"}, "-"))
	}()
	<-done
	if !strings.Contains(ft.msg, "not in internal/testtool's registry") {
		t.Fatalf("Need of an unregistered program said %q, want a failure naming the registry", ft.msg)
	}
}

// fatalRecorder keeps what Fatalf says and ends the goroutine, as
// testing's Fatalf does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
