package secret

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const known = "s3cret-Ch4p-passw0rd"

func write(t *testing.T, mode os.FileMode, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "chap")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadGood(t *testing.T) {
	v, err := Read(write(t, 0o600, known+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.Reveal() != known {
		t.Fatalf("got %q", v.Reveal())
	}
	for _, s := range []string{v.String(), fmt.Sprintf("%v %+v %#v %s", v, v, v, v)} {
		if strings.Contains(s, known) {
			t.Fatalf("secret leaked through formatting: %s", s)
		}
	}
	if b, _ := v.MarshalText(); strings.Contains(string(b), known) {
		t.Fatal("secret leaked through MarshalText")
	}
}

func TestRefused(t *testing.T) {
	good := write(t, 0o600, known)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	notRoot := write(t, 0o600, known)
	if err := os.Chown(notRoot, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		path, want string
	}{
		"world readable": {write(t, 0o644, known), "mode 0644"},
		"group readable": {write(t, 0o640, known), "mode 0640"},
		"symlink":        {link, "symlink"},
		"directory":      {t.TempDir(), "not a regular file"},
		"not root":       {notRoot, "uid 1000"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Read(c.path)
			if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInsecure naming %q", err, c.want)
			}
			if strings.Contains(err.Error(), known) {
				t.Fatal("error shows the secret")
			}
			if Check(c.path) == nil {
				t.Fatal("Check accepted it")
			}
		})
	}
}

func TestEmptyAndMissing(t *testing.T) {
	if _, err := Read(write(t, 0o600, "\n")); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty: %v", err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := Read(write(t, 0o600, strings.Repeat("x", MaxSize+1))); err == nil {
		t.Fatal("oversized file accepted")
	}
}

// A LUKS key file is used byte for byte, as cryptsetup --key-file reads it.
func TestReadExactKeepsNewline(t *testing.T) {
	v, err := ReadExact(write(t, 0o600, known+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(v.RevealBytes()) != known+"\n" {
		t.Fatalf("got %q, want the file's bytes with the newline", v.RevealBytes())
	}
	if _, err := ReadExact(write(t, 0o644, known)); err == nil {
		t.Fatal("ReadExact accepted a world-readable key file")
	}
}
