package main

import (
	"strings"
	"testing"
)

// A run's output becomes the host line and a table of medians, each other
// implementation's with its ratio to this project's: rates divided one way,
// times the other.
func TestTable(t *testing.T) {
	in := `goos: linux
BenchmarkHost-2   	       1	 251554409 ns/op	        36.0 host-stdlib-decode-MB/s
BenchmarkKafka/kfake/consume=10000/handlers=1/babelqueue-2 	 1	 5 ns/op	 60.0 handled-ms	 200000 msgs/s	 1.20 steady-cpus
BenchmarkKafka/kfake/consume=10000/handlers=1/watermill-2  	 1	 5 ns/op	 180.0 handled-ms	 100000 msgs/s	 2.00 steady-cpus
BenchmarkHost-2   	       1	 251554409 ns/op	        30.0 host-stdlib-decode-MB/s
BenchmarkKafka/kfake/consume=10000/handlers=1/babelqueue-2 	 1	 5 ns/op	 40.0 handled-ms	 400000 msgs/s
BenchmarkKafka/kfake/consume=10000/handlers=1/watermill-2  	 1	 5 ns/op	 120.0 handled-ms	 200000 msgs/s
BenchmarkHost-2   	       1	 251554409 ns/op	        33.0 host-stdlib-decode-MB/s
BenchmarkKafka/kfake/consume=10000/handlers=8-vs-1/babelqueue-2 	 1	 5 ns/op	 0.9432 h8/h1-handled	 0.4 h8-sooner-share
BenchmarkKafka/kfake/consume=10000/handlers=8-vs-1/watermill-2 	 1	 5 ns/op	 1.0312 h8/h1-handled	 0 h8-sooner-share
PASS
`
	tab, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	tab.write(&out)
	got := out.String()
	for _, want := range []string{
		"Host: the standard library decodes the envelope at 33.0 MB/s (median of 3;",
		"### Kafka on kfake",
		"| row | metric | babelqueue | watermill |",
		"| consume=10000/handlers=1 | msgs/s (higher is better) | 300.0k | 150.0k (2.00×) |",
		"| consume=10000/handlers=1 | handled-ms (lower is better) | 50.0 | 150 (3.00×) |",
		// A diagnostic metric: values without a ratio.
		"| consume=10000/handlers=1 | steady-cpus (CPUs busy over the steady rate's span) | 1.2 | 2.0 |",
		// Ratios near 1 with two decimals, a share of 0 included.
		"| consume=10000/handlers=8-vs-1 | h8/h1-handled (time to all handled, eight handlers over one; below 1, eight were sooner) | 0.94 | 1.03 |",
		"| consume=10000/handlers=8-vs-1 | h8-sooner-share (share of the pairs in which eight handlers were done sooner) | 0.40 | 0.00 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "### Host") {
		t.Errorf("the host line became a table:\n%s", got)
	}
}
