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
	for _, want := range []string{
		"--- FAIL: TestC (200ms)\n    c_test.go:3: boom\n",
		"FAIL\tp\t0.300s\n",
		"tests: 3 run, 1 skipped:\n",
		"  1 skipped: no Pulsar broker: run scripts/pulsar-server.sh start and set BQ_PULSAR_URL=pulsar://127.0.0.1:16650\n",
		"      p TestB\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if !r.failed {
		t.Error("a failed test did not fail the report")
	}
	if strings.Contains(got, "TestA") {
		t.Errorf("a passing test's output was printed:\n%s", got)
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
