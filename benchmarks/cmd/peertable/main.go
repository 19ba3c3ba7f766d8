// Command peertable reads `go test -bench` output of the benchmarks module
// from standard input and prints, for every broker, a Markdown table of each
// row's median per implementation and its ratio to this project.
//
//	go test -run '^$' -bench . -benchtime 1x -count 3 ./benchmarks/ | go run ./benchmarks/cmd/peertable
//
// A ratio is how many times better this project did than that column: its
// rate divided by theirs for rates, their time divided by its time for
// durations. Above 1, this project is ahead.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ours is the implementation every ratio is taken against.
const ours = "babelqueue"

// metrics lists the reported metrics in print order; lower says whether a
// lower value is better, and note, for a metric neither better nor worse
// either way, what it tells (its row then has no ratios); exact prints its
// values with two decimals, where a ratio near 1 would otherwise round to
// one.
var metrics = []struct {
	unit  string
	lower bool
	note  string
	exact bool
}{
	{"msgs/s", false, "", false},
	{"steady-cpus", false, "CPUs busy over the steady rate's span", false},
	{"handled-ms", true, "", false},
	{"committed-ms", true, "", false},
	{"p50-µs", true, "", false},
	{"p99-µs", true, "", false},
	{"cpu-µs/msg", true, "", false},
	{"h8/h1-handled", false, "time to all handled, eight handlers over one; below 1, eight were sooner", true},
	{"h8/h1-span", false, "steady span, eight handlers over one; below 1, eight were sooner", true},
	{"h8-sooner-share", false, "share of the pairs in which eight handlers were done sooner", true},
}

var procs = regexp.MustCompile(`-\d+$`)

type key struct{ group, row, unit string }

// hostUnit is BenchmarkHost's metric: the standard library's decode of the
// envelope, the machine's speed that the rows are read by.
const hostUnit = "host-stdlib-decode-MB/s"

type table struct {
	host   []float64           // BenchmarkHost's rates, one a run
	groups []string            // in input order
	rows   map[string][]string // group → rows in input order
	impls  map[string][]string // group → implementations in input order
	vals   map[key]map[string][]float64
}

func parse(r io.Reader) (*table, error) {
	t := &table{rows: map[string][]string{}, impls: map[string][]string{}, vals: map[key]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		parts := strings.Split(procs.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), ""), "/")
		if parts[0] == "Host" {
			for i := 2; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil && f[i+1] == hostUnit {
					t.host = append(t.host, v)
				}
			}
			continue
		}
		if len(parts) < 4 {
			continue
		}
		group := parts[0] + " on " + parts[1]
		row, impl := strings.Join(parts[2:len(parts)-1], "/"), parts[len(parts)-1]
		if !slices.Contains(t.groups, group) {
			t.groups = append(t.groups, group)
		}
		if !slices.Contains(t.rows[group], row) {
			t.rows[group] = append(t.rows[group], row)
		}
		if !slices.Contains(t.impls[group], impl) {
			t.impls[group] = append(t.impls[group], impl)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := key{group, row, f[i+1]}
			if t.vals[k] == nil {
				t.vals[k] = map[string][]float64{}
			}
			t.vals[k][impl] = append(t.vals[k][impl], v)
		}
	}
	return t, sc.Err()
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

func (t *table) write(w io.Writer) {
	if len(t.host) > 0 {
		fmt.Fprintf(w, "Host: the standard library decodes the envelope at %s MB/s (median of %d; the baseline core's codec benchmarks run beside the codec).\n\n",
			strconv.FormatFloat(median(t.host), 'f', 1, 64), len(t.host))
	}
	for _, g := range t.groups {
		impls := t.impls[g]
		if i := slices.Index(impls, ours); i > 0 {
			impls = append([]string{ours}, slices.Delete(slices.Clone(impls), i, i+1)...)
		}
		fmt.Fprintf(w, "### %s\n\n| row | metric |", g)
		for _, im := range impls {
			fmt.Fprintf(w, " %s |", im)
		}
		fmt.Fprint(w, "\n|---|---|")
		for range impls {
			fmt.Fprint(w, "---:|")
		}
		fmt.Fprintln(w)
		for _, row := range t.rows[g] {
			for _, m := range metrics {
				vals := t.vals[key{g, row, m.unit}]
				if len(vals) == 0 {
					continue
				}
				better := "higher is better"
				switch {
				case m.note != "":
					better = m.note
				case m.lower:
					better = "lower is better"
				}
				fmt.Fprintf(w, "| %s | %s (%s) |", row, m.unit, better)
				base, haveBase := 0.0, len(vals[ours]) > 0
				if haveBase {
					base = median(vals[ours])
				}
				for _, im := range impls {
					if len(vals[im]) == 0 {
						fmt.Fprint(w, " — |")
						continue
					}
					v := median(vals[im])
					if m.exact {
						fmt.Fprintf(w, " %s |", strconv.FormatFloat(v, 'f', 2, 64))
						continue
					}
					if im == ours || !haveBase || v == 0 || base == 0 || m.note != "" {
						fmt.Fprintf(w, " %s |", human(v))
						continue
					}
					ratio := base / v
					if m.lower {
						ratio = v / base
					}
					fmt.Fprintf(w, " %s (%.2f×) |", human(v), ratio)
				}
				fmt.Fprintln(w)
			}
		}
		fmt.Fprintf(w, "\n(×: how many times better %s did than that column; above 1, %s is ahead)\n\n", ours, ours)
	}
}

func main() {
	t, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peertable:", err)
		os.Exit(1)
	}
	if len(t.groups) == 0 {
		fmt.Fprintln(os.Stderr, "peertable: no benchmark lines on standard input")
		os.Exit(1)
	}
	t.write(os.Stdout)
}
