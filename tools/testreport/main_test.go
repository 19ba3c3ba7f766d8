package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.01}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: no Pulsar broker: run scripts/pulsar-server.sh start and set BQ_PULSAR_URL=pulsar://127.0.0.1:16650\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"run","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: boom\n"}
{"Action":"fail","Package":"p","Test":"TestC","Elapsed":0.2}
{"Action":"fail","Package":"p","Elapsed":0.3}
`

func TestReport(t *testing.T) {
	var out bytes.Buffer
	r := &report{out: &out, output: map[key][]string{}, skips: map[string][]string{}}
	if err := r.read(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	wantAll(t, got,
		"--- FAIL: TestC (200ms)\n    c_test.go:3: boom\n",
		"FAIL\tp\t0.300s\n",
		"tests: 3 run, 1 skipped:\n",
		"  1 skipped: no Pulsar broker: run scripts/pulsar-server.sh start and set BQ_PULSAR_URL=pulsar://127.0.0.1:16650\n",
		"      p TestB\n",
	)
	if !r.failed {
		t.Error("a failed test did not fail the report")
	}
	if strings.Contains(got, "TestA") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
}

// died is a test binary that panicked in a goroutine of a subtest: the
// package fails, and neither the test nor its subtest ever ends.
const died = `{"Action":"run","Package":"q","Test":"TestBoom"}
{"Action":"output","Package":"q","Test":"TestBoom","Output":"=== RUN   TestBoom\n"}
{"Action":"run","Package":"q","Test":"TestBoom/sub"}
{"Action":"output","Package":"q","Test":"TestBoom/sub","Output":"=== RUN   TestBoom/sub\n"}
{"Action":"output","Package":"q","Test":"TestBoom/sub","Output":"panic: runtime error: invalid memory address or nil pointer dereference\n"}
{"Action":"output","Package":"q","Test":"TestBoom/sub","Output":"\tq/dispatch.go:101 +0x405\n"}
{"Action":"output","Package":"q","Output":"FAIL\tq\t0.004s\n"}
{"Action":"fail","Package":"q","Elapsed":0.005}
`

func TestReportShowsWhyABinaryDied(t *testing.T) {
	var out bytes.Buffer
	r := &report{out: &out, output: map[key][]string{}, skips: map[string][]string{}}
	if err := r.read(strings.NewReader(died)); err != nil {
		t.Fatal(err)
	}
	wantAll(t, out.String(),
		"--- DID NOT FINISH: TestBoom/sub\n",
		"panic: runtime error: invalid memory address or nil pointer dereference\n\tq/dispatch.go:101 +0x405\n",
		"FAIL\tq\t0.005s\n",
	)
	if !r.failed {
		t.Error("a dead test binary did not fail the report")
	}
}

func TestSkipsFileRoundTrip(t *testing.T) {
	path := t.TempDir() + "/skips"
	for range 2 {
		r := &report{out: &bytes.Buffer{}, output: map[key][]string{}, skips: map[string][]string{}}
		if err := r.read(strings.NewReader(sample)); err != nil {
			t.Fatal(err)
		}
		if err := r.save(path); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	r := &report{out: &out, output: map[key][]string{}, skips: map[string][]string{}}
	if err := r.load(path); err != nil {
		t.Fatal(err)
	}
	r.summary()
	if !strings.Contains(out.String(), "tests: 6 run, 2 skipped:") || !strings.Contains(out.String(), "  2 skipped: no Pulsar broker") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// wantAll fails t for each of wants that got lacks.
func wantAll(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}
