package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree writes a fixture of files (path → content) under a temp dir.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAttr(t *testing.T) {
	dir := tree(t, map[string]string{
		"state":         "live\n",
		"device/serial": "  S3Z9NB0K  \x00\x00\n",
		"empty":         "",
		"big":           strings.Repeat("x", 3*maxAttr),
	})
	tests := []struct {
		elem    []string
		want    string
		missing bool
	}{
		{[]string{"state"}, "live", false},
		{[]string{"device", "serial"}, "S3Z9NB0K", false},
		{[]string{"empty"}, "", false},
		{[]string{"big"}, strings.Repeat("x", maxAttr), false},
		{[]string{"absent"}, "", true},
	}
	for _, tt := range tests {
		got, err := Attr(dir, tt.elem...)
		if got != tt.want || (err != nil) != tt.missing {
			t.Errorf("Attr(%v) = %.20q, %v; want %.20q, missing %v", tt.elem, got, err, tt.want, tt.missing)
		}
		if or := AttrOr(dir, tt.elem...); or != tt.want {
			t.Errorf("AttrOr(%v) = %.20q, want %.20q", tt.elem, or, tt.want)
		}
	}
}

// A path keeps its blanks; only the kernel's newline goes.
func TestText(t *testing.T) {
	dir := tree(t, map[string]string{"backing_file": " /srv/img \n", "bare": "/srv/img"})
	for name, want := range map[string]string{"backing_file": " /srv/img ", "bare": "/srv/img"} {
		if got, err := Text(dir, name); err != nil || got != want {
			t.Errorf("Text(%s) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := Text(dir, "absent"); err == nil {
		t.Error("Text of a missing attribute: no error")
	}
}

// A binary attribute keeps every byte, its last newline and NULs too,
// and one longer than any VPD page is refused, not cut short.
func TestBytes(t *testing.T) {
	page := "\x00\x83\x00\x0c\x01\x03\x00\x08" + "\x50\x01\x40\x5a\x00\x00\x00\x0a"
	dir := tree(t, map[string]string{
		"device/vpd_pg83": page,
		"longest":         strings.Repeat("x", maxBinary),
		"too_long":        strings.Repeat("x", maxBinary+1),
	})
	if got, err := Bytes(dir, "device", "vpd_pg83"); err != nil || string(got) != page {
		t.Errorf("Bytes(vpd_pg83) = %q, %v; want %q", got, err, page)
	}
	if got, err := Bytes(dir, "longest"); err != nil || len(got) != maxBinary {
		t.Errorf("Bytes(longest) = %d bytes, %v; want %d", len(got), err, maxBinary)
	}
	if got, err := Bytes(dir, "too_long"); err == nil || !strings.Contains(err.Error(), "too_long: longer than") {
		t.Errorf("Bytes(too_long) = %d bytes, %v; want an error naming it", len(got), err)
	}
	if _, err := Bytes(dir, "absent"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Bytes(absent): %v, want fs.ErrNotExist", err)
	}
}

func TestCountAndSize(t *testing.T) {
	tests := []struct {
		content string
		want    int64
		err     string
	}{
		{"2048\n", 2048, ""},
		{"0\n", 0, ""},
		{"-1\n", 0, `"-1" is not a count`},
		{"12k\n", 0, `"12k" is not a count`},
		{"9007199254740992\n", 9007199254740992, ""}, // 2^53
		{"9007199254740993\n", 0, "is not a count"},  // 2^53 + 1
		{"", 0, `"" is not a count`},
	}
	for _, tt := range tests {
		dir := tree(t, map[string]string{"size": tt.content})
		got, err := Count(dir, "size")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), filepath.Join(dir, "size")) {
				t.Errorf("Count(%q) = %d, %v; want an error naming the file and %q", tt.content, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Count(%q) = %d, %v; want %d", tt.content, got, err, tt.want)
		}
		if size, err := Size(dir); err != nil || size != tt.want*512 {
			t.Errorf("Size(%q) = %d, %v; want %d bytes", tt.content, size, err, tt.want*512)
		}
	}
}

func TestDevNumber(t *testing.T) {
	tests := []struct {
		content      string
		major, minor uint32
		ok           bool
	}{
		{"7:3\n", 7, 3, true},
		{"259:0\n", 259, 0, true},
		{"7\n", 0, 0, false},
		{"7:x\n", 0, 0, false},
		{"4294967296:0\n", 0, 0, false},
	}
	for _, tt := range tests {
		dir := tree(t, map[string]string{"dev": tt.content})
		ma, mi, err := DevNumber(dir)
		if (err == nil) != tt.ok || ma != tt.major || mi != tt.minor {
			t.Errorf("DevNumber(%q) = %d:%d, %v; want %d:%d ok %v", tt.content, ma, mi, err, tt.major, tt.minor, tt.ok)
		}
	}
}

// A disk's partitions are its subdirectories with a partition
// attribute; its holders the entries of holders/, none without one.
func TestPartitionsAndHolders(t *testing.T) {
	dir := tree(t, map[string]string{
		"sda/size":              "100\n",
		"sda/sda2/partition":    "2\n",
		"sda/sda1/partition":    "1\n",
		"sda/queue/rotational":  "0\n",
		"sda/sda1/holders/dm-0": "",
		"sda/holders/md0":       "",
		"sdb/size":              "100\n",
	})
	parts, err := Partitions(filepath.Join(dir, "sda"))
	if err != nil || !slices.Equal(parts, []string{"sda1", "sda2"}) {
		t.Errorf("Partitions = %q, %v", parts, err)
	}
	if !IsPartition(filepath.Join(dir, "sda", "sda1")) || IsPartition(filepath.Join(dir, "sda")) {
		t.Error("IsPartition mistook a disk or a partition")
	}
	for _, tt := range []struct {
		dir  string
		want []string
	}{{"sda", []string{"md0"}}, {"sda/sda1", []string{"dm-0"}}, {"sdb", nil}} {
		hs, err := Holders(filepath.Join(dir, tt.dir))
		if err != nil || !slices.Equal(hs, tt.want) {
			t.Errorf("Holders(%s) = %q, %v; want %q", tt.dir, hs, err, tt.want)
		}
	}
	if _, err := Partitions(filepath.Join(dir, "absent")); err == nil {
		t.Error("Partitions of a missing directory: no error")
	}
}

// A disk's partitions are its own subdirectories: a link it holds (bdi,
// subsystem, device) leads elsewhere, even to another disk's partition.
func TestPartitionsAreNoLinks(t *testing.T) {
	dir := tree(t, map[string]string{
		"sda/sda1/partition": "1\n",
		"sdb/sdb1/partition": "1\n",
	})
	if err := os.Symlink(filepath.Join(dir, "sdb", "sdb1"), filepath.Join(dir, "sda", "device")); err != nil {
		t.Fatal(err)
	}
	parts, err := Partitions(filepath.Join(dir, "sda"))
	if err != nil || !slices.Equal(parts, []string{"sda1"}) {
		t.Errorf("Partitions = %q, %v; want sda1 alone", parts, err)
	}
}
