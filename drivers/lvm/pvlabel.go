package lvm

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// uuidChars are the characters lvm2 takes in a UUID (its id_valid), less
// the two that are not alphanumerics.
const uuidChars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// pvPrefixLen is how many of a PV UUID's 32 characters say which VG
// volumed made it for (62^12, about 2^71: no PV made otherwise carries
// one by chance).
const pvPrefixLen = 12

// pvPrefix is the start of the UUID of every PV volumed makes for vg.
func pvPrefix(vg string) string { return uuidOf("volumed-vg\x00"+vg, pvPrefixLen) }

// uuidOf spells n characters of uuidChars from the hash of s.
func uuidOf(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	var b strings.Builder
	for i := range n {
		b.WriteByte(uuidChars[int(sum[i])%len(uuidChars)])
	}
	return b.String()
}

// PVUUID is the UUID volumed gives the PV it makes for vg on the disk of
// identity (pvcreate --uuid): its first characters name the VG, so a PV
// volumed made is known as its own by its UUID wherever the disk is (a
// crash between pvcreate and vgcreate leaves one that no tag can mark:
// an orphan PV holds no tags); the rest is the disk's, so two disks
// never share one. It is lvm2's printed form (6-4-4-4-4-4-6).
func PVUUID(vg, identity string) string {
	return dashed(pvPrefix(vg) + uuidOf("volumed-pv\x00"+vg+"\x00"+identity, 32-pvPrefixLen))
}

// dashed prints a 32-character UUID as lvm2 does.
func dashed(u string) string {
	var b strings.Builder
	for i, n := range []int{6, 4, 4, 4, 4, 4, 6} {
		if i > 0 {
			b.WriteByte('-')
		}
		b.WriteString(u[:n])
		u = u[n:]
	}
	return b.String()
}

// OursFor says whether a PV UUID (dashed or not) is one volumed made for
// vg: the one rule for "is this PV ours".
func OursFor(vg, uuid string) bool {
	u := strings.ReplaceAll(uuid, "-", "")
	return len(u) == 32 && strings.HasPrefix(u, pvPrefix(vg))
}

// labelSectors: lvm2 writes its label in one of the first four 512-byte
// sectors (the second, by default).
const labelSectors = 4

// ParseLabel reads the PV UUID from the first 2 KiB of a device: "" when
// no LVM2 label is there. A label whose UUID is not 32 of lvm2's
// characters is an error: something is there that is not what it seems.
func ParseLabel(b []byte) (string, error) {
	for s := range labelSectors {
		off := s * 512
		if len(b) < off+32 || string(b[off:off+8]) != "LABELONE" || string(b[off+24:off+32]) != "LVM2 001" {
			continue
		}
		if binary.LittleEndian.Uint64(b[off+8:]) != uint64(s) {
			continue // a copy of a label that names another sector
		}
		at := off + int(binary.LittleEndian.Uint32(b[off+20:]))
		if at < off+32 || at+32 > off+512 || at+32 > len(b) {
			return "", fmt.Errorf("LVM2 label in sector %d: its PV header offset %d is outside the sector", s, at-off)
		}
		u := string(b[at : at+32])
		for _, c := range u {
			if !strings.ContainsRune(uuidChars+"!#", c) {
				return "", fmt.Errorf("LVM2 label in sector %d: PV UUID %q holds %q", s, u, c)
			}
		}
		return dashed(u), nil
	}
	return "", nil
}

// ReadLabel reads the PV UUID of the LVM2 label on device, "" when it
// has none.
func ReadLabel(device string) (string, error) {
	f, err := os.Open(device)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, labelSectors*512)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("read the LVM2 label of %s: %w", device, err)
	}
	u, err := ParseLabel(b[:n])
	if err != nil {
		return "", fmt.Errorf("%s: %w", device, err)
	}
	return u, nil
}
