package secret

// FromBytes holds a secret made in memory (a key unsealed by a TPM), not
// read from a file; b is not copied.
func FromBytes(b []byte) Value { return Value{b: b} }
