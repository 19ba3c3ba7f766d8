package core

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"unicode/utf8"
	"unsafe"
)

// The helpers below walk JSON that the scanner has already validated and
// that has no whitespace between tokens, so they never see insignificant whitespace and never need to
// report syntax errors: each returns the end offset of the value starting at i.

// skipValue returns the index just past the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		switch b[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i + 1
		}
		i++
	}
	return i
}

// objectSpans appends where the members of the compact, valid object at
// b[start] are to spans.
func objectSpans(b []byte, start int, spans []span) []span {
	i := start + 1
	for i < len(b) && b[i] != '}' {
		ke := skipString(b, i)
		ve := skipValue(b, ke+1)
		esc := bytes.IndexByte(b[i:ke], '\\') >= 0
		spans = append(spans, span{ks: int32(i), ke: int32(ke), vs: int32(ke + 1), ve: int32(ve), esc: esc})
		i = ve
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
	return spans
}

// Key classes: classOf functions number an object's contract keys from 1
// (0: any other key); a class from classRepeated on is a key every
// occurrence of which counts (a forbidden key, reported each time).
const classRepeated = 32

// classify sets each span's class and drops every member but the last of a
// contract key: of a duplicated contract key only the last counts (it alone
// is checked and kept), as with encoding/json and every peer's parser. It
// returns the members that count, in their order, in spans' array.
func classify(b []byte, spans []span, classOf func([]byte) uint8) []span {
	var seen uint32
	dups := false
	for k := len(spans) - 1; k >= 0; k-- {
		sp := &spans[k]
		c := classOf(sp.name(b))
		sp.class = c
		if c != 0 && c < classRepeated {
			sp.dup = seen&(1<<c) != 0
			dups = dups || sp.dup
			seen |= 1 << c
		}
	}
	if dups {
		spans = slices.DeleteFunc(spans, func(sp span) bool { return sp.dup })
	}
	return spans
}

// inlineExtras is how many unknown members are gathered on the stack before
// the one exact-size copy Decode keeps.
const inlineExtras = 16

// ownedString is unquote for a string inside the decoder's own copy of the
// body, which is never written again: a string without escapes is that
// copy's bytes, shared, with no allocation.
func ownedString(s []byte) (string, bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	i := 0
	// Eight bytes at a time while they are ASCII without a backslash.
	for ; i+8 <= len(inner); i += 8 {
		if w := binary.LittleEndian.Uint64(inner[i : i+8]); w&msb|hasZero(w^backslashes) != 0 {
			break
		}
	}
	for ; i < len(inner); i++ {
		if c := inner[i]; c == '\\' {
			return unquote(s)
		} else if c >= utf8.RuneSelf {
			if bytes.IndexByte(inner[i:], '\\') >= 0 || !utf8.Valid(inner[i:]) {
				return unquote(s) // invalid UTF-8 becomes U+FFFD, as encoding/json does
			}
			break
		}
	}
	if len(inner) == 0 {
		return "", true
	}
	return unsafe.String(&inner[0], len(inner)), true
}

// plainString is ownedString for a string the scan found plain (no
// escape, no byte of 0x80 or above: scanner.special unset): the bytes
// between its quotes, shared.
func plainString(s []byte) string {
	return unsafe.String(unsafe.SliceData(s[1:]), len(s)-2)
}

// fieldString is the string member s: plainString when plain, else
// ownedString.
func fieldString(s []byte, plain bool) string {
	if plain {
		return plainString(s)
	}
	out, _ := ownedString(s)
	return out
}

// plainPrefix returns how many leading bytes of s go into a JSON string
// as they are (ASCII with no '"', '\\' or control byte): len(s) when all
// of them do, else an offset at or before the first that does not. It
// reads eight bytes at a time, the last eight over the ones before them
// rather than one by one.
func plainPrefix(s string) int {
	if len(s) < 8 {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
				return i
			}
		}
		return len(s)
	}
	for i := 0; ; i += 8 {
		if i+8 > len(s) {
			i = len(s) - 8
		}
		if needsLook(load64(s, i)) {
			return i
		}
		if i+8 == len(s) {
			return len(s)
		}
	}
}

// load64 is the eight bytes of s from i, little-endian (one load).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// needsLook reports whether a byte of w is non-ASCII, '"', '\\' or a
// control byte.
func needsLook(w uint64) bool {
	return w&msb|hasZero(w^quotes)|hasZero(w^backslashes)|hasLess(w, 0x20) != 0
}

// keep returns a heap copy of the gathered members, nil for none: one
// allocation however many unknown keys a message carries.
func keep(ms []member) []member {
	if len(ms) == 0 {
		return nil
	}
	return append([]member(nil), ms...)
}

// unquote returns the Go string of the raw JSON string s. The common case, a
// string without escapes, costs one allocation for the result.
func unquote(s []byte) (string, bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	for _, c := range inner {
		if c == '\\' || c < 0x20 {
			var out string
			if err := json.Unmarshal(s, &out); err != nil {
				return "", false
			}
			return out, true
		}
	}
	if !utf8.Valid(inner) {
		var out string
		if err := json.Unmarshal(s, &out); err != nil {
			return "", false
		}
		return out, true
	}
	return string(inner), true
}

// keyIs reports whether the raw quoted key equals name. Keys with escapes are
// unquoted first so that "\u006aob" is still "job".
func keyIs(raw []byte, name string) bool {
	if len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name {
		return true
	}
	for _, c := range raw {
		if c == '\\' {
			k, ok := unquote(raw)
			return ok && k == name
		}
	}
	return false
}

// parseUint parses a JSON number that must be a non-negative integer without
// fraction or exponent, fitting in an int64.
func parseUint(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n < 0 {
			return 0, false
		}
	}
	return n, true
}

// parseCount parses a non-negative JSON integer of any length, saturating at
// the largest int: the contract allows any integer ≥ 0 (the Python SDK writes
// 2^63 when it retries a message at MaxInt64), and a count that large is
// exhausted under any max-attempts setting.
func parseCount(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n, sat := 0, false
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if sat {
			continue
		}
		d := int(c - '0')
		if n > (maxIntValue-d)/10 {
			n, sat = maxIntValue, true
			continue
		}
		n = n*10 + d
	}
	return n, true
}

const maxIntValue = int(^uint(0) >> 1)

// ParseAttempts parses a native attempts header or property ("3"): a
// non-negative decimal integer, saturating at the largest int instead of
// failing on overflow. ok is false for anything else (empty, signed,
// non-digits).
func ParseAttempts(s string) (n int, ok bool) { return parseCount([]byte(s)) }

// appendString appends s as a JSON string: only '"', '\\' and control
// characters are escaped; HTML characters, '/' and non-ASCII stay as they are,
// as the wire contract requires. Invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	i := plainPrefix(s)
	if i == len(s) { // the usual field: a URN, an id, a queue name
		dst = append(dst, s...)
		return append(dst, '"')
	}
	start := 0
	for i < len(s) {
		// Eight plain ASCII bytes at a time: nothing to escape, no UTF-8 to
		// check.
		for i+8 <= len(s) && !needsLook(load64(s, i)) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
