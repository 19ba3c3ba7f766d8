package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// decodeExact decodes raw JSON keeping numbers as json.Number.
func decodeExact(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// JSONEqual reports whether a and b are the same JSON value: deep equality
// with type distinction (true ≠ 1, {} ≠ []), numbers compared by exact
// decimal value so integers beyond 2^53 are never rounded.
func JSONEqual(a, b []byte) (bool, error) {
	va, err := decodeExact(a)
	if err != nil {
		return false, fmt.Errorf("left: %w", err)
	}
	vb, err := decodeExact(b)
	if err != nil {
		return false, fmt.Errorf("right: %w", err)
	}
	return valueEqual(va, vb), nil
}

func valueEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !valueEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !valueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		if !okx || !oky {
			return string(x) == string(y)
		}
		return rx.Cmp(ry) == 0
	default:
		return a == b
	}
}

// Pointer resolves an RFC 6901 JSON pointer in doc and returns the raw value.
func Pointer(doc []byte, ptr string) (json.RawMessage, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := json.RawMessage(doc)
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		trimmed := bytes.TrimSpace(cur)
		if len(trimmed) == 0 {
			return nil, false
		}
		switch trimmed[0] {
		case '{':
			var m map[string]json.RawMessage
			if json.Unmarshal(trimmed, &m) != nil {
				return nil, false
			}
			v, ok := m[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case '[':
			var a []json.RawMessage
			if json.Unmarshal(trimmed, &a) != nil {
				return nil, false
			}
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(a) {
				return nil, false
			}
			cur = a[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// compact returns raw with insignificant whitespace removed.
func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
