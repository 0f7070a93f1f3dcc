package ostest

import "fmt"

// lvmVolume is the manifest of volume name on an lvm source: source is
// its fields in flow style ("volumeGroup: vg0, size: 64Mi"), fs the
// filesystem's ("type: ext4"); mounted at /srv/NAME.
func lvmVolume(name, source, fs string) string {
	return fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: %s}
spec:
  source:
    lvm: {%s}
  filesystem: {%s}
  mounts: [{path: /srv/%s}]
`, name, source, fs, name)
}

// addLVMVolume puts lvmVolume's manifest into the machine's volumes.d.
func addLVMVolume(m *Machine, name, source, fs string) {
	m.AddFile("/etc/volumed/volumes.d/"+name+".yaml", 0o644, lvmVolume(name, source, fs))
}

// addVGSetup adds the oneshot unit ostest-NAME.service that runs before
// volumed at every boot: at the first, the shell first (which makes the
// test's VG; serial_disk SERIAL prints the virtio disk of that serial, by
// /sys/block since udev's links may not be there yet); at the later
// boots, later.
func addVGSetup(m *Machine, name, what, first, later string) {
	m.AddFile("/usr/lib/ostest/"+name+".sh", 0o755, fmt.Sprintf(`#!/bin/sh
. /usr/lib/ostest/lib.sh
serial_disk() {
	for d in /sys/block/vd*; do
		ser=
		read -r ser 2>/dev/null <"$d/serial"
		[ "$ser" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
	done
	fail "no disk with serial $1"
	return 1
}
if [ -e /var/lib/ostest/%[1]s-made ]; then
%[2]s
	exit 0
fi
%[3]s
mkdir -p /var/lib/ostest
touch /var/lib/ostest/%[1]s-made
sync /var/lib/ostest
`, name, later, first))
	m.AddUnit("ostest-"+name+".service", fmt.Sprintf(`[Unit]
Description=ostest: %s, before volumed
DefaultDependencies=no
After=local-fs.target systemd-udevd.service
Before=volumed.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ostest/%s.sh
`, what, name), "sysinit.target")
}
