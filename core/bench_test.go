package core_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/babelqueue/transports/conformance"
	"github.com/babelqueue/transports/core"
)

func fixture(b *testing.B, name string) []byte {
	s, err := conformance.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	body, err := s.Fixture(name)
	if err != nil {
		b.Fatal(err)
	}
	e, err := core.Decode(body)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := e.Encode() // compact, as a broker delivers it
	return out
}

// stdlibDecode is what a Go user does without this package: the envelope
// into a map, numbers kept exact.
func stdlibDecode(body []byte) (map[string]any, error) {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	err := d.Decode(&m)
	return m, err
}

// largeOrder is the encoded envelope of an order of n items: about 16 KiB
// of data for n = 200, where scanning the data, not the envelope's fixed
// fields, is what a decode costs.
func largeOrder(b *testing.B, n int) []byte {
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"sku": "sku-" + strconv.Itoa(100000+i), "qty": i%7 + 1, "price": 12.5,
			"note": "gift wrap, leave at the door"}
	}
	e, err := core.New("urn:babel:orders:created", map[string]any{"order_id": 1042, "items": items}, core.WithQueue("orders"))
	if err != nil {
		b.Fatal(err)
	}
	body, err := e.Encode()
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecode compares Decode with the standard library's decode of the
// same body into a map (run both: -bench Decode; benchstat the pair): the
// canonical envelope, one with unknown keys at both levels, and a 16 KiB
// order.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"canonical", "fixtures/unknown-both-levels.json", "order-16k"} {
		var body []byte
		switch name {
		case "canonical":
			body = []byte(canonical)
		case "order-16k":
			body = largeOrder(b, 200)
		default:
			body = fixture(b, name)
		}
		b.Run("body="+strings.TrimSuffix(strings.TrimPrefix(name, "fixtures/"), ".json")+"/babelqueue", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := core.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The consumer's decode: RetainBody, the envelope pointing into the
		// body it owns instead of a copy.
		b.Run("body="+strings.TrimSuffix(strings.TrimPrefix(name, "fixtures/"), ".json")+"/babelqueue-retained", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			dec := core.NewDecoder(core.RetainBody())
			for b.Loop() {
				if _, err := dec.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("body="+strings.TrimSuffix(strings.TrimPrefix(name, "fixtures/"), ".json")+"/stdlib", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := stdlibDecode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRetryHop is the retry path, decode → attempts+1 → encode, with
// unknown keys at both levels carried along, against the standard library
// doing the same through a map (json.Number, attempts+1, json.Marshal).
func BenchmarkRetryHop(b *testing.B) {
	body := fixture(b, "fixtures/unknown-both-levels.json")
	// "babelqueue-retained" is the consumer's hop: it owns each body it
	// receives, so it decodes with RetainBody and skips the copy.
	for _, c := range []struct {
		name string
		dec  *core.Decoder
	}{{"impl=babelqueue", core.NewDecoder()}, {"impl=babelqueue-retained", core.NewDecoder(core.RetainBody())}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				e, err := c.dec.Decode(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.WithAttempts(e.Attempts + 1).Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("impl=stdlib", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			m, err := stdlibDecode(body)
			if err != nil {
				b.Fatal(err)
			}
			n, err := m["attempts"].(json.Number).Int64()
			if err != nil {
				b.Fatal(err)
			}
			m["attempts"] = json.Number(strconv.FormatInt(n+1, 10))
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	e, _ := core.Decode([]byte(canonical))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAccepts(b *testing.B) {
	body := []byte(canonical)
	b.ReportAllocs()
	for b.Loop() {
		if !core.Accepts(body) {
			b.Fatal("rejected")
		}
	}
}

// BenchmarkRetryReencodeCanonical is the same for the canonical order-created body.
func BenchmarkRetryReencodeCanonical(b *testing.B) {
	body := []byte(canonical)
	b.ReportAllocs()
	for b.Loop() {
		e, _ := core.Decode(body)
		if _, err := e.WithAttempts(e.Attempts + 1).Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDeadLetterAnnotate(b *testing.B) {
	e, _ := core.Decode([]byte(canonical))
	cause := errors.New("gateway timeout")
	b.ReportAllocs()
	for b.Loop() {
		dl := e.WithAttempts(3).DeadLettered(core.NewDeadLetter(core.ReasonFailed, cause, "orders", 3, fixedTime))
		if _, err := dl.Encode(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewEncode is building an envelope and encoding it: UUID, clock
// and trace id included, for a 300-byte payload given as raw JSON and as a
// struct (whose json.Marshal is the standard library's, not the codec's);
// New then Encode, and NewEncoded (what Publisher.Publish uses).
func BenchmarkNewEncode(b *testing.B) {
	type order struct {
		ID       int64    `json:"order_id"`
		Customer string   `json:"customer"`
		Items    []string `json:"items"`
		Note     string   `json:"note"`
	}
	payload := order{ID: 1042, Customer: "acme-industries", Items: []string{"sku-1", "sku-2", "sku-3"}, Note: strings.Repeat("n", 200)}
	raw, _ := json.Marshal(payload)
	for _, c := range []struct {
		name string
		data any
	}{{"data=raw", json.RawMessage(raw)}, {"data=struct", payload}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := core.New("urn:babel:orders:created", c.data, core.WithQueue("orders"))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, c := range []struct {
		name string
		data any
	}{{"data=raw", json.RawMessage(raw)}, {"data=struct", payload}} {
		b.Run("NewEncoded/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := core.NewEncoded("urn:babel:orders:created", c.data, core.WithQueue("orders")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// The floor under the rows above: NewEncoded's two allocations (an
	// envelope, a 523-byte body) made and dropped, and nothing else. On a
	// small heap the garbage collector's cost grows with the bytes
	// allocated, so this is what building any envelope this way costs
	// before any work is done.
	b.Run("alloc-floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkEnv = new(core.Envelope)
			sinkBody = make([]byte, 0, 523)
		}
	})
}

var (
	sinkEnv  *core.Envelope
	sinkBody []byte
)
