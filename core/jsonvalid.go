package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// maxDepth is encoding/json's nesting limit, kept so that both accept and
// reject the same bodies.
const maxDepth = 10000

// span is one member of an object, as offsets into the body (Decode refuses
// bodies over maxBody bytes, so they fit in 32 bits). esc reports that the
// key has an escape; class and dup are Decode's: which contract key it is
// (0: none) and whether a later member has the same contract key.
type span struct {
	ks, ke, vs, ve int32
	esc            bool
	class          uint8
	dup            bool
}

// maxBody is the largest body Decode reads: 2 GiB, far above what any
// broker carries.
const maxBody = 1<<31 - 1

// name returns the unquoted bytes of the member's key, in place unless the
// key has escapes.
func (sp *span) name(b []byte) []byte {
	if sp.esc {
		k, _ := unquote(b[sp.ks:sp.ke])
		return []byte(k)
	}
	return b[sp.ks+1 : sp.ke-1]
}

// inlineSpans is how many top-level members are recorded on the stack.
const inlineSpans = 32

// scanner validates JSON in one pass, by recursive descent, with the
// grammar and nesting limit of encoding/json (strings are not checked for
// valid UTF-8, as encoding/json does not). While it validates the top-level
// object it records where each member's key and value are, so Decode never
// walks the body twice. spaced reports whether the body had any whitespace
// outside strings: only then does Decode compact it.
type scanner struct {
	b      []byte
	spaced bool
	esc    bool // a string since the last reset had an escape
	// special reports that some string of the body may have an escape or
	// a byte of 0x80 or above (it may also be set by such a byte just
	// past a string's closing quote, read in the same eight): while it
	// is unset, every string is the bytes between its quotes, and Decode
	// takes them as they are (plainString) without a second look.
	special bool
	depth   int
	// topClassed and metaClassed report that the recorded top-level and
	// meta spans have their classes set (topClass, metaClass) and need no
	// classify: no key has an escape and no contract key repeats.
	topClassed, metaClassed bool
}

var errSyntax = errors.New("invalid JSON")

func (s *scanner) fail(i int, what string) error {
	if i >= len(s.b) {
		return fmt.Errorf("%w: unexpected end of input (%s)", errSyntax, what)
	}
	return fmt.Errorf("%w: invalid character %q at offset %d (%s)", errSyntax, s.b[i], i, what)
}

func (s *scanner) ws(i int) int {
	if i < len(s.b) && s.b[i] > ' ' {
		return i // compact JSON: no whitespace, one comparison
	}
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			s.spaced = true
			i++
		default:
			return i
		}
	}
	return i
}

// scanBody validates the whole body and, when it is an object, appends
// where each of its members is to spans. (The spans are a parameter and a
// result, never a field, so that a caller's stack array stays on the stack.)
//
// It records the members of the last "meta" object member too, in meta;
// metaAt is where that object starts (-1: none recorded).
func scanBody(s *scanner, spans, meta []span) (top, metaOut []span, metaAt int, err error) {
	i := s.ws(0)
	end := 0
	metaAt = -1
	if i < len(s.b) && s.b[i] == '{' {
		end, spans, meta, metaAt, err = topObject(s, i, spans, meta)
	} else {
		end, err = s.value(i)
	}
	if err != nil {
		return spans, meta, metaAt, err
	}
	if end = s.ws(end); end != len(s.b) {
		return spans, meta, metaAt, s.fail(end, "after the top-level value")
	}
	return spans, meta, metaAt, nil
}

// scanValid validates the whole body without recording anything.
func scanValid(s *scanner) error {
	end, err := s.value(s.ws(0))
	if err != nil {
		return err
	}
	if end = s.ws(end); end != len(s.b) {
		return s.fail(end, "after the top-level value")
	}
	return nil
}

// topObject is object for the top-level object, recording its members, and
// those of its "meta" object.
func topObject(s *scanner, i int, spans, meta []span) (end int, top, metaOut []span, metaAt int, err error) {
	metaAt = -1
	s.depth++
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		s.depth--
		return i + 1, spans, meta, metaAt, nil
	}
	var seen uint32
	s.topClassed = true
	for {
		ks, ke, vs, esc, err := s.key(i)
		if err != nil {
			return vs, spans, meta, metaAt, err
		}
		var class uint8
		if !esc {
			class = topClass(s.b[ks+1 : ke-1])
		}
		s.topClassed = s.topClassed && !esc && !repeated(&seen, class)
		var ve int
		if class == classMeta && vs < len(s.b) && s.b[vs] == '{' {
			s.depth++
			ve, meta, err = recordObject(s, vs, meta[:0])
			s.depth--
			metaAt = vs
		} else {
			ve, err = s.value(vs)
		}
		if err != nil {
			return ve, spans, meta, metaAt, err
		}
		spans = append(spans, span{ks: int32(ks), ke: int32(ke), vs: int32(vs), ve: int32(ve), esc: esc, class: class})
		if i, err = s.next(ve, '}', "after object key:value pair"); err != nil || i < 0 {
			s.depth--
			return -i, spans, meta, metaAt, err
		}
	}
}

// repeated reports whether the contract key class was seen before, and
// marks it seen.
func repeated(seen *uint32, class uint8) bool {
	if class == 0 || class >= classRepeated {
		return false
	}
	was := *seen&(1<<class) != 0
	*seen |= 1 << class
	return was
}

// recordObject validates the meta object at i (depth already counted) and
// appends where its members are, and their classes, to spans.
func recordObject(s *scanner, i int, spans []span) (int, []span, error) {
	s.metaClassed = true
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1, spans, nil
	}
	var seen uint32
	for {
		ks, ke, vs, esc, err := s.key(i)
		if err != nil {
			return vs, spans, err
		}
		var class uint8
		if !esc {
			class = metaClass(s.b[ks+1 : ke-1])
		}
		s.metaClassed = s.metaClassed && !esc && !repeated(&seen, class)
		ve, err := s.value(vs)
		if err != nil {
			return ve, spans, err
		}
		spans = append(spans, span{ks: int32(ks), ke: int32(ke), vs: int32(vs), ve: int32(ve), esc: esc, class: class})
		if i, err = s.next(ve, '}', "after object key:value pair"); err != nil {
			return i, spans, err
		}
		if i < 0 {
			return -i, spans, nil
		}
	}
}

// key validates the object key at i and its ':', and returns where the key
// is, where its value starts, and whether the key has an escape.
func (s *scanner) key(i int) (ks, ke, vs int, esc bool, err error) {
	if i >= len(s.b) || s.b[i] != '"' {
		return 0, 0, i, false, s.fail(i, "looking for beginning of object key string")
	}
	s.esc = false
	if ke, err = s.str(i); err != nil {
		return 0, 0, ke, false, err
	}
	j := s.ws(ke)
	if j >= len(s.b) || s.b[j] != ':' {
		return 0, 0, j, false, s.fail(j, "after object key")
	}
	return i, ke, s.ws(j + 1), s.esc, nil
}

// next reads what follows an element at i: ',' (it returns the offset of
// the next element) or closer (it returns minus the offset just past it).
func (s *scanner) next(i int, closer byte, what string) (int, error) {
	i = s.ws(i)
	if i >= len(s.b) {
		return i, s.fail(i, what)
	}
	switch s.b[i] {
	case ',':
		return s.ws(i + 1), nil
	case closer:
		return -(i + 1), nil
	}
	return i, s.fail(i, what)
}

// value validates the value at i and returns the offset just past it.
func (s *scanner) value(i int) (int, error) {
	if i >= len(s.b) {
		return i, s.fail(i, "looking for a value")
	}
	switch c := s.b[i]; {
	case c == '"':
		return s.str(i)
	case c == '{':
		return s.object(i)
	case c == '[':
		return s.array(i)
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	}
	return i, s.fail(i, "looking for a value")
}

func (s *scanner) literal(i int, lit string) (int, error) {
	if len(s.b)-i >= len(lit) && string(s.b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	for j := 0; j < len(lit); j++ {
		if i+j >= len(s.b) || s.b[i+j] != lit[j] {
			return i + j, s.fail(i+j, "in literal "+lit)
		}
	}
	return i + len(lit), nil
}

// strSafe marks the bytes a string holds as they are: not '"', not '\\',
// not a control character.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str validates the string at i (its opening quote) and returns the offset
// just past its closing quote.
func (s *scanner) str(i int) (int, error) {
	b := s.b
	i++
	var seen uint64 // every byte read, or'ed: its high bits tell of a byte >= 0x80
	for {
		// Eight bytes at a time while none needs a look: no '"', '\\' or
		// control byte. The lowest flagged byte is always a true one (a
		// false alarm can only sit above a true one), so the scan jumps
		// straight to it; only the last few bytes of the body go one by one.
		if i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i : i+8])
			seen |= w
			m := hasZero(w^quotes) | hasZero(w^backslashes) | hasLess(w, 0x20)
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(b) && strSafe[b[i]] {
				seen |= uint64(b[i])
				i++
			}
			if i >= len(b) {
				return i, s.fail(i, "in string literal")
			}
		}
		switch c := b[i]; {
		case c == '"':
			if seen&msb != 0 {
				s.special = true
			}
			return i + 1, nil
		case c == '\\':
			s.esc = true
			s.special = true
			if i+1 >= len(b) {
				return i + 1, s.fail(i+1, "in string escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := 2; j < 6; j++ {
					if i+j >= len(b) || !isHex(b[i+j]) {
						return i + j, s.fail(i+j, `in \u hexadecimal character escape`)
					}
				}
				i += 6
			default:
				return i + 1, s.fail(i+1, "in string escape code")
			}
		default: // a control byte
			return i, s.fail(i, "in string literal")
		}
	}
}

const (
	lsb         = 0x0101010101010101
	msb         = 0x8080808080808080
	quotes      = lsb * '"'
	backslashes = lsb * '\\'
)

// hasZero is non-zero when a byte of x is zero (bit hacks: no false
// negatives; a false positive only above a zero byte).
func hasZero(x uint64) uint64 { return (x - lsb) &^ x & msb }

// hasLess is non-zero when a byte of x is below n (n ≤ 128).
func hasLess(x, n uint64) uint64 { return (x - lsb*n) &^ x & msb }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scanner) number(i int) (int, error) {
	b := s.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, s.fail(i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, s.fail(i, "after decimal point in numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, s.fail(i, "in exponent of numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

func (s *scanner) push(i int) error {
	s.depth++
	if s.depth > maxDepth {
		return fmt.Errorf("%w: exceeded max depth at offset %d", errSyntax, i)
	}
	return nil
}

func (s *scanner) object(i int) (int, error) {
	if err := s.push(i); err != nil {
		return i, err
	}
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		s.depth--
		return i + 1, nil
	}
	for {
		_, _, vs, _, err := s.key(i)
		if err != nil {
			return vs, err
		}
		ve, err := s.value(vs)
		if err != nil {
			return ve, err
		}
		if i, err = s.next(ve, '}', "after object key:value pair"); err != nil {
			return i, err
		}
		if i < 0 {
			s.depth--
			return -i, nil
		}
	}
}

func (s *scanner) array(i int) (int, error) {
	if err := s.push(i); err != nil {
		return i, err
	}
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == ']' {
		s.depth--
		return i + 1, nil
	}
	for {
		ve, err := s.value(i)
		if err != nil {
			return ve, err
		}
		if i, err = s.next(ve, ']', "after array element"); err != nil {
			return i, err
		}
		if i < 0 {
			s.depth--
			return -i, nil
		}
	}
}
