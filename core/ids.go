package core

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"sync"
	"unsafe"

	"github.com/google/uuid"
)

// uuidLen is the length of a UUID's canonical text form.
const uuidLen = 36

// newIDs returns two random (version 4) UUIDs in canonical text form, for
// meta.id and trace_id, written after the end of dst (whose spare capacity
// holds them without an allocation) and never written again; with two
// false only the first is generated (the second is "").
func newIDs(dst []byte, two bool) (string, string) {
	var raw [32]byte
	n := 1
	if two {
		n = 2
	}
	src := idSources.Get().(*mrand.ChaCha8)
	_, _ = src.Read(raw[:16*n]) // never fails
	idSources.Put(src)
	start := len(dst)
	dst = append(dst, make([]byte, uuidLen*n)...)
	text := dst[start:]
	for i := range n {
		u := uuid.UUID(raw[16*i : 16*i+16])
		u[6] = u[6]&0x0f | 0x40 // version 4
		u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
		formatUUID(text[uuidLen*i:uuidLen*(i+1)], u)
	}
	s := unsafe.String(&text[0], len(text))
	if n == 1 {
		return s, ""
	}
	return s[:uuidLen], s[uuidLen:]
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

// idSources are the random sources of new UUIDs: ChaCha8 generators (a
// cryptographically strong generator, the one Go's runtime uses), each
// seeded from crypto/rand when the pool makes it and used by one goroutine
// at a time. Drawing 32 bytes from one costs a fraction of a crypto/rand
// read, which is a call into the kernel's generator per envelope (or, as
// uuid.EnableRandPool does, a shared buffer behind a global lock).
var idSources = sync.Pool{New: func() any {
	var seed [32]byte
	_, _ = rand.Read(seed[:]) // never fails since Go 1.24
	return mrand.NewChaCha8(seed)
}}
