package core

import (
	"crypto/rand"
	"encoding/hex"
	"sync"

	"github.com/google/uuid"
)

// newIDs returns two random (version 4) UUIDs in canonical text form, for
// meta.id and trace_id, in one string allocation; with two false only the
// first is generated (the second is "").
func newIDs(two bool) (string, string) {
	var raw [32]byte
	n := 1
	if two {
		n = 2
	}
	rb := randBlocks.Get().(*randBlock)
	rb.read(raw[:16*n])
	randBlocks.Put(rb)
	var text [72]byte
	for i := range n {
		u := uuid.UUID(raw[16*i : 16*i+16])
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
		formatUUID(text[36*i:36*i+36], u)
	}
	s := string(text[:36*n])
	if n == 1 {
		return s, ""
	}
	return s[:36], s[36:]
}

// formatUUID writes u as xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx into dst.
func formatUUID(dst []byte, u uuid.UUID) {
	hex.Encode(dst[0:8], u[0:4])
	dst[8] = '-'
	hex.Encode(dst[9:13], u[4:6])
	dst[13] = '-'
	hex.Encode(dst[14:18], u[6:8])
	dst[18] = '-'
	hex.Encode(dst[19:23], u[8:10])
	dst[23] = '-'
	hex.Encode(dst[24:36], u[10:16])
}

// randBlock holds random bytes read from crypto/rand a block at a time, so
// that New reads the kernel's generator once every few dozen envelopes
// instead of once each (as uuid.EnableRandPool does, without global state
// that every user of the uuid package shares).
type randBlock struct {
	b   [1024]byte
	off int // bytes of b already handed out
}

var randBlocks = sync.Pool{New: func() any { return &randBlock{off: len(randBlock{}.b)} }}

// read fills dst (at most len(b) bytes) with random bytes.
func (r *randBlock) read(dst []byte) {
	if len(r.b)-r.off < len(dst) {
		_, _ = rand.Read(r.b[:]) // never fails since Go 1.24
		r.off = 0
	}
	r.off += copy(dst, r.b[r.off:])
	clear(r.b[r.off-len(dst) : r.off]) // handed-out bytes are not kept
}
