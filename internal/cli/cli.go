// Package cli describes volumed's command line: its commands and their
// flags, as data. The shell completions (volumed completion) and the
// volumed(8) man page (packaging/man) are made from it, and a test of
// cmd/volumed checks it against the flags each command really parses,
// so neither can drift from the binary.
package cli

// Flag is one flag of a command. Arg is empty for a boolean flag.
type Flag struct {
	Name  string // without dashes: "socket", "o"
	Arg   string // "PATH", "DIR", "FILE", "DURATION", ... (completes files for PATH, DIR, FILE)
	Usage string
	// Values are what the flag takes, when it is one of a few words.
	Values []string
}

// Command is one subcommand.
type Command struct {
	Name     string
	Args     string // after the flags in the synopsis: "NAME...", "PATH..."
	Short    string // one line, for completion menus
	Summary  string // the man page's paragraph
	Flags    []Flag
	Operands string // what the operands complete to: "volumes", "files", "shells" or ""
}

const socketUsage = "unix socket of the running agent (default /run/volumed/volumed.sock)"

// Commands are volumed's commands, in the order the man page lists them.
func Commands() []Command {
	socket := Flag{Name: "socket", Arg: "PATH", Usage: socketUsage}
	return []Command{
		{Name: "run", Short: "run the agent", Summary: "Run the agent: read the manifests, attach, format and mount the volumes they declare, and keep them so; serve the local API on the socket and Prometheus metrics.",
			Flags: []Flag{
				{Name: "config-dir", Arg: "DIR", Usage: "manifest directory (repeatable; replaces the default drop-in directories)"},
				{Name: "state-dir", Arg: "DIR", Usage: "state directory: state.db and the staging mounts (default /var/lib/volumed)"},
				{Name: "socket", Arg: "PATH", Usage: "unix socket of the local API (default /run/volumed/volumed.sock)"},
				{Name: "ready-dir", Arg: "DIR", Usage: "keep an empty file named after each usable volume here, which volumed-wait@.service tests; every file in it is removed at each start and stop (default /run/volumed/ready with the default --socket, none with another)"},
				{Name: "metrics-address", Arg: "ADDR", Usage: "Prometheus listener, host:port; empty disables it (default 127.0.0.1:9760)"},
				{Name: "resync", Arg: "DURATION", Usage: "period of the drift check and manifest re-read (default 1m)"},
				{Name: "log-format", Arg: "FORMAT", Usage: "log format (default text)", Values: []string{"text", "json"}},
				{Name: "log-level", Arg: "LEVEL", Usage: "least severe level logged (default info)", Values: []string{"debug", "info", "warn", "error"}},
				{Name: "parallel", Arg: "N", Usage: "operations running at once, across volumes (default 32)"},
				{Name: "op-timeout", Arg: "DURATION", Usage: "bound on one operation (a mkfs, a mount, a login) on a disk that answers late: past it the operation is stopped, fails saying so, and is retried after a backoff; 0 disables (default 30m)"},
				{Name: "firmware-root", Arg: "DIR", Usage: "root of the tree holding /sys/firmware, /etc/iscsi and /etc/nvme, for tests and chroots (default /)"},
				{Name: "csi-endpoint", Arg: "ENDPOINT", Usage: "also serve the Kubernetes CSI node service (driver volumed.io) on this unix:// socket, e.g. unix:///var/lib/kubelet/plugins/volumed.io/csi.sock; the kubelet's volumes join the manifests' in the same state (default: not served)"},
				{Name: "csi-allow-suid-dev", Usage: "let a CSI volume context (a PV's volumeAttributes or mount flags) set filesystem.allowSuid or allowDev; without it such a NodeStageVolume is refused and every CSI mount is nosuid,nodev, since a PV's author is not the host's owner"},
				{Name: "node-id", Arg: "NAME", Usage: "the CSI node ID and topology.volumed.io/node value; it must be the Kubernetes node name (default: the host name)"},
				{Name: "csi-loop-pool", Arg: "DIR", Usage: "also serve the CSI Controller service, provisioning volumes of StorageClasses with backend: loop as image files in this directory, made at their first stage (needs --csi-endpoint; default: no Controller service)"},
				{Name: "csi-loop-reserve", Arg: "SIZE", Usage: "space the loop pool keeps free on its filesystem: GetCapacity never promises it (default 1Gi)"},
				{Name: "csi-lvm-volume-groups", Arg: "VG,...", Usage: "also serve the CSI Controller service, provisioning volumes of StorageClasses with backend: lvm as LVs (linear or thin) in these volume groups only, made at their first stage (needs --csi-endpoint)"},
			}},
		{Name: "status", Short: "show the volumes", Args: "[NAME...]", Summary: "Show the volumes (a table of 80 columns), or with names each volume's conditions, targets and events.",
			Operands: "volumes",
			Flags: []Flag{
				{Name: "o", Arg: "FORMAT", Usage: "output format (default table)", Values: []string{"table", "json"}},
				socket,
			}},
		{Name: "validate", Short: "check manifests", Args: "PATH...", Summary: "Check manifest files, or the manifest files in directories, as the agent would read them, and print each problem as file:line:col: field: reason. Also warns when this host lacks a program or kernel feature a manifest needs.",
			Operands: "files",
			Flags: []Flag{
				{Name: "strict", Usage: "exit 1 on a warning too (a program or kernel feature this host lacks)"},
				{Name: "state-dir", Arg: "DIR", Usage: "the agent's state directory; targets on or under it are refused (default /var/lib/volumed)"},
			}},
		{Name: "wait", Short: "wait until volumes are Ready", Args: "NAME...", Summary: "Wait until each named volume is Ready (or Degraded); for units that need a volume. Says on standard error what it is waiting for.",
			Operands: "volumes",
			Flags: []Flag{
				{Name: "timeout", Arg: "DURATION", Usage: "give up after this long (default 5m)"},
				{Name: "fail-missing", Usage: "fail at once when no manifest defines a named volume, instead of waiting for one to appear"},
				socket,
			}},
		{Name: "shutdown", Short: "tear down network volumes before poweroff", Summary: "With --network, tear down the iSCSI and NVMe-oF volumes before the network goes down at poweroff; they stay down until the agent exits or --undo sets them up again.",
			Flags: []Flag{
				{Name: "network", Usage: "tear down the network volumes (iSCSI, NVMe-oF)"},
				{Name: "undo", Usage: "set the network volumes up again (after a shutdown --network that was not followed by a poweroff)"},
				{Name: "timeout", Arg: "DURATION", Usage: "give up after this long (default 90s)"},
				socket,
			}},
		{Name: "disks", Short: "list the disks a selector sees", Summary: "List every whole disk with the facts a disk selector sees (path, size, model, vendor, serial, WWN, transport, rotational, removable, read-only, blank or the signatures on it, its partitions and their GPT labels) and, when the agent runs, the volumes on it. With --match, try a selector: which disk it picks, and for every other disk the parts of the expression that are false. Reads each disk's first and last sectors, so it needs root.",
			Flags: []Flag{
				{Name: "o", Arg: "FORMAT", Usage: "output format (default table)", Values: []string{"table", "json"}},
				{Name: "match", Arg: "EXPR", Usage: "a disk selector (CEL) to try, e.g. 'disk.transport == \"nvme\" && disk.size >= 100 * GiB'"},
				socket,
			}},
		{Name: "wipe", Short: "make a disk blank for reuse", Args: "DEVICE", Summary: "Make a device blank by volumed's blank rule, so that a volume may format it: erase every signature blkid knows on it and its partitions (wipefs --all), what wipefs misses at both ends (a GPT's backup header, md superblocks, ZFS labels, a Ceph bluestore label), the kernel's partitions, then discard it (BLKDISCARD) where it can or zero what the blank rule reads, and check it is blank. Refuses a device that is mounted, held (device-mapper, md, LVM), open exclusively elsewhere, the firmware's boot device, or a volume's in the state or the running agent. Prints what it would do; does it only with --yes. With --volume, the device a former volume used, from the state, after its manifest is gone.",
			Flags: []Flag{
				{Name: "yes", Usage: "do it; without it, only print what would be done"},
				{Name: "volume", Arg: "NAME", Usage: "wipe the device a former volume of this name used, found in the state"},
				{Name: "state-dir", Arg: "DIR", Usage: "the agent's state directory (default /var/lib/volumed)"},
				{Name: "firmware-root", Arg: "DIR", Usage: "root of the tree holding /sys/firmware, whose boot volumes are never wiped (default /)"},
				socket,
			}},
		{Name: "recovery-key", Short: "enrol a recovery key in an encrypted volume", Args: "NAME", Operands: "volumes", Summary: "Enrol a new recovery key in the LUKS2 header of an encrypted volume, in a keyslot of its own, opened with the manifest's keys, and print it once: 64 characters in systemd-cryptenroll's format, which a person can type where the volume's passphrase is asked (cryptsetup open, systemd-cryptsetup) when its other keys fail (a changed TPM, an unreachable Tang server). The key is kept nowhere and never logged; its keyslot carries a systemd-recovery token. Asks the running agent, which runs it as the volume's one operation.",
			Flags: []Flag{
				{Name: "timeout", Arg: "DURATION", Usage: "give up after this long (default 2m)"},
				socket,
			}},
		{Name: "completion", Short: "print a shell completion script", Args: "bash|zsh", Summary: "Print the shell completion script for bash or zsh.", Operands: "shells"},
		{Name: "version", Short: "print the version", Summary: "Print the version, the Go version and the platform."},
		{Name: "help", Short: "print the usage", Summary: "Print the usage."},
	}
}

// Shells are the shells volumed completion writes scripts for.
func Shells() []string { return []string{"bash", "zsh"} }
