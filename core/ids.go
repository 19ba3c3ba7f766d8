package core

import (
	"encoding/binary"
	mrand "math/rand/v2"
	"unsafe"
)

// uuidLen is the length of a UUID's canonical text form.
const uuidLen = 36

// freshID writes a random (version 4) UUID in canonical text form into the
// first uuidLen bytes of b, which are never written again, and returns them
// as a string sharing b's memory.
func freshID(b []byte) string {
	putUUID((*[uuidLen]byte)(b))
	return unsafe.String(&b[0], uuidLen)
}

// putUUID writes a random (version 4) UUID in canonical text form into dst.
//
// The random bits come from math/rand/v2's global generator: the Go
// runtime's ChaCha8, seeded from the operating system's entropy and kept
// per thread, so drawing them takes no lock, no pool and no system call.
// A v4 UUID needs 122 unpredictable, never-repeating bits, not secrecy:
// that is what it gives, at a small part of a crypto/rand read's cost.
func putUUID(dst *[uuidLen]byte) {
	var u [16]byte
	binary.LittleEndian.PutUint64(u[:8], mrand.Uint64())
	binary.LittleEndian.PutUint64(u[8:], mrand.Uint64())
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	formatUUID(dst, &u)
}

// hexPairs is the two lower-case hex digits of every byte value, in order.
const hexPairs = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" +
	"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" +
	"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f" +
	"606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f" +
	"808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f" +
	"a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf" +
	"c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf" +
	"e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"

// formatUUID writes u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx into dst, two
// digits a byte from hexPairs.
func formatUUID(dst *[uuidLen]byte, u *[16]byte) {
	put := func(at int, c byte) { dst[at], dst[at+1] = hexPairs[2*int(c)], hexPairs[2*int(c)+1] }
	put(0, u[0])
	put(2, u[1])
	put(4, u[2])
	put(6, u[3])
	dst[8] = '-'
	put(9, u[4])
	put(11, u[5])
	dst[13] = '-'
	put(14, u[6])
	put(16, u[7])
	dst[18] = '-'
	put(19, u[8])
	put(21, u[9])
	dst[23] = '-'
	put(24, u[10])
	put(26, u[11])
	put(28, u[12])
	put(30, u[13])
	put(32, u[14])
	put(34, u[15])
}
