package decide

// Problem is something wrong that a check found: a condition's reason
// and message.
type Problem struct{ Reason, Message string }

// Signature is one thing found on a device.
type Signature struct {
	Type   string // ext4, xfs, gpt, crypto_LUKS, ...
	Usage  string // filesystem, partition_table, crypto, raid, other
	Offset int64
}

// FSInfo is what a filesystem says of itself without being mounted.
type FSInfo struct {
	UUID string
	// EverMounted: the filesystem records a mount (false also when its
	// type keeps no such record).
	EverMounted bool
	// Bytes: the size the filesystem spans by its superblock; 0 when
	// not known.
	Bytes int64
}

// BindOptions are the flags a publish applies to its bind mount.
type BindOptions struct{ ReadOnly, NoSuid, NoDev, NoExec bool }

// LUKSHeader is what a device's LUKS2 headers say, without a key.
type LUKSHeader struct {
	// Found: a LUKS header (whole or not) is on the device.
	Found bool
	// Whole: a copy of the header is complete and valid (it can be opened).
	Whole bool
	UUID  string
	// HalfWritten: the device holds exactly the torn header of the
	// interrupted encrypt's UUID (and nothing of anyone else's).
	HalfWritten bool
}
