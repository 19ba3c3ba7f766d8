// Command testreport reads `go test -json` on its standard input and prints
// what a person wants from a long test run: one line per package as go test
// prints it (ok / FAIL, with its time), the full output of every failed
// test and of every test a dying test binary left unfinished, and at the end a summary of the skipped tests grouped by the reason
// they gave, so that integration tests that skipped for want of a server are
// never mistaken for passes. It exits 1 when anything failed.
//
//	go test -json ./kafka/... | go run ./tools/testreport
//
// With -skips FILE it also appends the skips it saw to FILE, and
// `testreport -summarize FILE` prints the summary of everything appended
// there: how make test, which runs one module at a time, ends.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

type report struct {
	out     io.Writer
	output  map[key][]string // output of running tests, dropped when they pass
	skips   map[string][]string
	failed  bool
	tests   int
	skipped int
}

func main() {
	skipsFile := flag.String("skips", "", "append the skipped tests to this file")
	summarize := flag.String("summarize", "", "print the summary of the skips appended to this file, and exit")
	flag.Parse()
	r := &report{out: os.Stdout, output: map[key][]string{}, skips: map[string][]string{}}
	if *summarize != "" {
		if err := r.load(*summarize); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		r.summary()
		return
	}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if *skipsFile != "" {
		if err := r.save(*skipsFile); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	} else {
		r.summary()
	}
	if r.failed {
		os.Exit(1)
	}
}

// record is one line of a -skips file: the counts of a run, or one skip.
type record struct {
	Tests  int    `json:"tests,omitempty"`
	Reason string `json:"reason,omitempty"`
	Test   string `json:"test,omitempty"`
}

func (r *report) save(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	_ = enc.Encode(record{Tests: r.tests})
	for reason, tests := range r.skips {
		for _, t := range tests {
			_ = enc.Encode(record{Reason: reason, Test: t})
		}
	}
	return f.Close()
}

func (r *report) load(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec record
		if line == "" || json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		r.tests += rec.Tests
		if rec.Test != "" {
			r.skipped++
			r.skips[rec.Reason] = append(r.skips[rec.Reason], rec.Test)
		}
	}
	return nil
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// Not an event: a build error, printed as it came.
			fmt.Fprintln(r.out, string(line))
			if strings.Contains(string(line), "FAIL") || strings.Contains(string(line), "cannot") {
				r.failed = true
			}
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "output":
		r.output[k] = append(r.output[k], e.Output)
		if e.Test == "" && strings.HasPrefix(e.Output, "FAIL") && !strings.HasPrefix(e.Output, "FAIL\t") && !strings.HasPrefix(e.Output, "FAIL\n") {
			r.failed = true
		}
	case "pass":
		if e.Test != "" {
			r.tests++
			delete(r.output, k)
			return
		}
		fmt.Fprintf(r.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		delete(r.output, k)
	case "skip":
		if e.Test == "" { // a package without tests
			fmt.Fprintf(r.out, "?   \t%s\t[no test files]\n", e.Package)
			return
		}
		r.tests++
		r.skipped++
		reason := skipReason(r.output[k])
		r.skips[reason] = append(r.skips[reason], e.Package+" "+e.Test)
		delete(r.output, k)
	case "fail":
		r.failed = true
		if e.Test != "" {
			r.tests++
			fmt.Fprintf(r.out, "--- FAIL: %s (%s)\n", e.Test, time.Duration(e.Elapsed*float64(time.Second)).Round(time.Millisecond))
			for _, l := range r.output[k] {
				fmt.Fprint(r.out, l)
			}
			delete(r.output, k)
			return
		}
		// A test binary that died (a panic in a goroutine, a timeout, a
		// race report after the tests) ends its package without ending the
		// tests that were running: their output holds the reason.
		var running []string
		for o := range r.output {
			if o.pkg == e.Package && o.test != "" {
				running = append(running, o.test)
			}
		}
		sort.Strings(running)
		for _, name := range running {
			o := key{e.Package, name}
			fmt.Fprintf(r.out, "--- DID NOT FINISH: %s\n", name)
			for _, l := range r.output[o] {
				fmt.Fprint(r.out, l)
			}
			delete(r.output, o)
		}
		for _, l := range r.output[k] { // package-level output: panics, TestMain failures
			if !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- ") && strings.TrimSpace(l) != "FAIL" {
				fmt.Fprint(r.out, l)
			}
		}
		fmt.Fprintf(r.out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		delete(r.output, k)
	}
}

// skipReason is the last line a skipped test logged (its t.Skip message),
// without the file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if _, rest, ok := strings.Cut(l, ": "); ok && strings.Contains(l[:len(l)-len(rest)], ".go:") {
			l = rest
		}
		return l
	}
	return "(no reason given)"
}

func (r *report) summary() {
	if r.skipped == 0 {
		fmt.Fprintf(r.out, "tests: %d run, none skipped\n", r.tests)
		return
	}
	fmt.Fprintf(r.out, "tests: %d run, %d skipped:\n", r.tests, r.skipped)
	reasons := make([]string, 0, len(r.skips))
	for reason := range r.skips {
		reasons = append(reasons, reason)
	}
	sort.Slice(reasons, func(i, j int) bool { return len(r.skips[reasons[i]]) > len(r.skips[reasons[j]]) })
	for _, reason := range reasons {
		tests := r.skips[reason]
		fmt.Fprintf(r.out, "  %d skipped: %s\n", len(tests), reason)
		for i, t := range tests {
			if i == 3 {
				fmt.Fprintf(r.out, "      … and %d more\n", len(tests)-3)
				break
			}
			fmt.Fprintf(r.out, "      %s\n", t)
		}
	}
}
