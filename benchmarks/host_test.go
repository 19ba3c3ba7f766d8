package benchmarks

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// hostDecodes is how many decodes BenchmarkHost times.
const hostDecodes = 20_000

// stdlibDecodeRate decodes this project's encoded envelope n times with
// the standard library, into a map with exact numbers (json.Number), and
// returns the rate in MB/s.
func stdlibDecodeRate(tb testing.TB, n int) float64 {
	body := encodedMessage(tb, "orders").Body
	start := time.Now()
	for range n {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(n*len(body)) / time.Since(start).Seconds() / 1e6
}

// BenchmarkHost measures the machine, to read the other rows by: on the
// small shared machines these run on, the same binary's speed moves by
// 2–3× from one day or host to another. It is the standard library
// decoding the envelope into a map, the baseline core's codec benchmarks
// run beside the codec. It times a fixed hostDecodes decodes whatever
// -benchtime asks (bench-peers runs every benchmark once) and reports
// their rate as host-stdlib-decode-MB/s, which peertable prints above its
// tables.
func BenchmarkHost(b *testing.B) {
	for range b.N {
		b.ReportMetric(stdlibDecodeRate(b, hostDecodes), "host-stdlib-decode-MB/s")
	}
}

// TestHostBaseline keeps BenchmarkHost's decode working (CI builds the
// benchmarks and does not run them).
func TestHostBaseline(t *testing.T) {
	if rate := stdlibDecodeRate(t, 10); rate <= 0 {
		t.Errorf("decode rate %v MB/s", rate)
	}
}
