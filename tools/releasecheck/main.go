// Command releasecheck checks that the modules of this repository can be
// released and used as their users will use them, before any tag is made:
//
//  1. it builds each module's zip from the committed tree exactly as the Go
//     module proxy serves it (golang.org/x/mod/zip), with its .mod and
//     .info, into a file-based GOPROXY in a temporary directory;
//  2. in a scratch service module outside the repository it `go get`s each
//     broker module from that proxy with GOWORK=off and builds a program
//     against it; the Kafka program also publishes and consumes a message
//     through an in-process kfake cluster;
//  3. it compares each module's exported API with its previous tag (or with
//     -base REV) using golang.org/x/exp/apidiff, and fails on an
//     incompatible change that the version does not allow (v0: a new minor
//     version; v1 and later: a new major version).
//
// It prints one row per module: module, version, zip size, consumer build,
// API verdict.
//
//	go run ./tools/releasecheck                      # every module at the version its dependents require
//	go run ./tools/releasecheck -version kafka=v0.2.0 -base HEAD~10
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
	"golang.org/x/tools/go/packages"
)

const prefix = "github.com/babelqueue/transports/"

// order is the release order: a module after the ones it requires.
var order = []string{"conformance", "core", "kafka", "sqs", "pulsar", "azureservicebus", "otel", "cmd/bq", "idempotency/redis", "idempotency/postgres", "outbox/postgres"}

// brokers are the modules a service imports; each gets a consumer program.
var brokers = map[string]string{
	"kafka":           kafkaProgram,
	"sqs":             buildOnly("sqs", `_ = sqs.NewSender(nil)`),
	"pulsar":          buildOnly("pulsar", `_ = pulsar.NewSender(nil)`),
	"azureservicebus": buildOnly("azureservicebus", `_ = azureservicebus.NewSender(nil)`),
}

type row struct {
	module, version, zipSize, consumer, api string
	failed                                  bool
}

func main() {
	versions := flag.String("version", "", "comma-separated module=version pairs (default: the version the module's dependents require, else the next minor after its last tag, else v0.1.0)")
	base := flag.String("base", "", "compare the API with this git revision instead of each module's previous tag")
	keep := flag.Bool("keep", false, "keep the temporary directory")
	flag.Parse()
	if err := run(*versions, *base, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		os.Exit(1)
	}
}

func run(versionFlag, base string, keep bool) error {
	root, err := git("", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("not in a git checkout: %w", err)
	}
	if dirty, _ := git(root, "status", "--porcelain"); dirty != "" {
		fmt.Fprintln(os.Stderr, "releasecheck: the work tree has uncommitted changes; the zips are built from HEAD")
	}
	tmp, err := os.MkdirTemp("", "releasecheck-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "releasecheck: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	versions, err := chooseVersions(root, versionFlag)
	if err != nil {
		return err
	}
	proxy := filepath.Join(tmp, "proxy")
	rows := map[string]*row{}
	for _, m := range order {
		r := &row{module: m, version: versions[m]}
		rows[m] = r
		size, err := publish(root, proxy, m, versions[m])
		if err != nil {
			r.zipSize, r.failed = "error: "+oneLine(err.Error()), true
			continue
		}
		r.zipSize = fmt.Sprintf("%d KiB", (size+1023)/1024)
	}
	head := filepath.Join(tmp, "head")
	if err := extract(root, "HEAD", head); err != nil {
		return err
	}
	for _, m := range order {
		r := rows[m]
		if prog, ok := brokers[m]; ok {
			r.consumer = consume(tmp, proxy, m, versions[m], prog)
			r.failed = r.failed || !strings.HasPrefix(r.consumer, "ok")
		} else {
			r.consumer = "-"
		}
		verdict, ok := apiVerdict(root, tmp, head, m, versions[m], base)
		r.api, r.failed = verdict, r.failed || !ok
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tversion\tzip\tconsumer build\tAPI")
	failed := false
	for _, m := range order {
		r := rows[m]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.module, r.version, r.zipSize, r.consumer, r.api)
		failed = failed || r.failed
	}
	tw.Flush()
	if failed {
		return errors.New("a module cannot be released as it is (see the table)")
	}
	return nil
}

// chooseVersions gives every module its version to release.
func chooseVersions(root, flagValue string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(flagValue, ",") {
		if kv == "" {
			continue
		}
		m, v, ok := strings.Cut(kv, "=")
		if !ok || !semver.IsValid(v) || semver.Canonical(v) != v {
			return nil, fmt.Errorf("-version %q: want module=vX.Y.Z", kv)
		}
		if _, err := os.Stat(filepath.Join(root, m, "go.mod")); err != nil {
			return nil, fmt.Errorf("-version %q: %s is not a module of this repository", kv, m)
		}
		out[m] = v
	}
	required := map[string]string{} // what the dependents require
	for _, m := range order {
		mf, err := readModFile(filepath.Join(root, m, "go.mod"))
		if err != nil {
			return nil, err
		}
		for _, r := range mf.Require {
			if s, ok := strings.CutPrefix(r.Mod.Path, prefix); ok && semver.Compare(r.Mod.Version, required[s]) > 0 {
				required[s] = r.Mod.Version
			}
		}
	}
	for _, m := range order {
		if out[m] != "" {
			continue
		}
		last := lastTag(root, m)
		switch {
		case required[m] != "" && semver.Compare(required[m], last) > 0:
			out[m] = required[m]
		case last != "":
			out[m] = nextMinor(last)
		default:
			out[m] = "v0.1.0"
		}
	}
	return out, nil
}

func nextMinor(v string) string {
	var major, minor int
	fmt.Sscanf(strings.TrimPrefix(semver.Canonical(v), "v"), "%d.%d", &major, &minor)
	return fmt.Sprintf("v%d.%d.0", major, minor+1)
}

func lastTag(root, m string) string {
	out, _ := git(root, "tag", "--list", m+"/v*")
	var best string
	for _, t := range strings.Fields(out) {
		v := strings.TrimPrefix(t, m+"/")
		if semver.IsValid(v) && semver.Compare(v, best) > 0 {
			best = v
		}
	}
	return best
}

// publish writes m@v into the file proxy as the module proxy would serve
// it and returns the zip's size.
func publish(root, proxy, m, v string) (int64, error) {
	mv := module.Version{Path: prefix + m, Version: v}
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	zipPath := filepath.Join(dir, v+".zip")
	f, err := os.Create(zipPath)
	if err != nil {
		return 0, err
	}
	if err := zip.CreateFromVCS(f, mv, root, "HEAD", m); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	mod, err := git(root, "show", "HEAD:"+m+"/go.mod")
	if err != nil {
		return 0, err
	}
	info, _ := json.Marshal(map[string]any{"Version": v, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, data := range map[string][]byte{v + ".mod": []byte(mod + "\n"), v + ".info": info, "list": []byte(v + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return 0, err
		}
	}
	if _, err := zip.CheckZip(mv, zipPath); err != nil {
		return 0, err
	}
	st, err := os.Stat(zipPath)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// consume builds (and for Kafka runs) a program of a scratch service module
// that gets module m@v from the file proxy, outside the repository.
func consume(tmp, proxy, m, v, program string) string {
	dir := filepath.Join(tmp, "service-"+strings.ReplaceAll(m, "/", "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "error: " + err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		return "error: " + err.Error()
	}
	upstream, _ := goEnv("GOPROXY")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+upstream,
		"GONOSUMDB="+prefix+"*", "GONOSUMCHECK=1", "GOFLAGS=-buildvcs=false")
	steps := [][]string{
		{"go", "mod", "init", "example.com/service"},
		{"go", "get", prefix + m + "@" + v},
		{"go", "mod", "tidy"},
		{"go", "build", "-o", "service", "."},
	}
	for _, s := range steps {
		if out, err := command(dir, env, 5*time.Minute, s...); err != nil {
			return fmt.Sprintf("FAILED at %s: %s", strings.Join(s[1:], " "), lastLine(out))
		}
	}
	if m != "kafka" {
		return "ok (built)"
	}
	out, err := command(dir, env, 2*time.Minute, "./service")
	if err != nil {
		return "FAILED at run: " + lastLine(out)
	}
	return "ok (" + lastLine(out) + ")"
}

// apiVerdict compares m's exported API at HEAD with its previous tag (or
// base) and says whether version v allows the difference.
func apiVerdict(root, tmp, head, m, v, base string) (string, bool) {
	against, baseVersion := base, ""
	if against == "" {
		baseVersion = lastTag(root, m)
		if baseVersion == "" {
			return "first release (no previous tag)", true
		}
		against = m + "/" + baseVersion
	}
	if _, err := os.Stat(filepath.Join(root, m)); err != nil {
		return "error: " + err.Error(), false
	}
	old := filepath.Join(tmp, "base-"+strings.NewReplacer("/", "_", "~", "_", "^", "_").Replace(against))
	if _, err := os.Stat(old); err != nil {
		if err := extract(root, against, old); err != nil {
			return "error: " + err.Error(), false
		}
	}
	if _, err := os.Stat(filepath.Join(old, m, "go.mod")); err != nil {
		return "new module (absent at " + against + ")", true
	}
	oldMod, err := load(filepath.Join(old, m), prefix+m)
	if err != nil {
		return "error loading " + against + ": " + err.Error(), false
	}
	newMod, err := load(filepath.Join(head, m), prefix+m)
	if err != nil {
		return "error loading HEAD: " + err.Error(), false
	}
	report := apidiff.ModuleChanges(oldMod, newMod)
	var incompatible, compatible int
	for _, c := range report.Changes {
		if c.Compatible {
			compatible++
		} else {
			incompatible++
		}
	}
	if incompatible == 0 {
		return fmt.Sprintf("compatible with %s (%d additions)", against, compatible), true
	}
	allowed := baseVersion == "" // against a plain revision nothing is promised
	if baseVersion != "" {
		if semver.Major(baseVersion) == "v0" {
			allowed = semver.Compare(semver.MajorMinor(v), semver.MajorMinor(baseVersion)) > 0
		} else {
			allowed = semver.Compare(semver.Major(v), semver.Major(baseVersion)) > 0
		}
	}
	first := ""
	for _, c := range report.Changes {
		if !c.Compatible {
			first = c.Message
			break
		}
	}
	verdict := fmt.Sprintf("%d incompatible changes vs %s (first: %s)", incompatible, against, first)
	if !allowed {
		return "FAILED: " + verdict + "; " + v + " does not allow them", false
	}
	if baseVersion == "" {
		return verdict + " (a revision, not a release: reported only)", true
	}
	return verdict + ", allowed by " + v, true
}

// load type-checks the non-internal packages of the module in dir. The
// tree's go.work, when it has one, resolves the siblings (older trees
// replaced them there rather than in each go.mod).
func load(dir, path string) (*apidiff.Module, error) {
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if w := filepath.Join(filepath.Dir(dir), "go.work"); fileExists(w) {
		env = append(os.Environ(), "GOWORK="+w, "GOFLAGS=")
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedSyntax | packages.NeedDeps | packages.NeedImports,
		Dir:  dir,
		Env:  env,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	mod := &apidiff.Module{Path: path}
	var errs []string
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		if strings.Contains(p.PkgPath, "/internal") || p.Name == "main" || p.Types == nil {
			continue
		}
		mod.Packages = append(mod.Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, errors.New(errs[0])
	}
	sort.Slice(mod.Packages, func(i, j int) bool { return mod.Packages[i].Path() < mod.Packages[j].Path() })
	return mod, nil
}

// extract writes the tree of rev into dir.
func extract(root, rev, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	tar := exec.Command("tar", "-x", "-C", dir)
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	tar.Stdin = pipe
	if err := tar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	return tar.Wait()
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readModFile(path string) (*modfile.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(path, b, nil)
}

func git(dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	out, err := exec.Command("git", args...).Output()
	return strings.TrimSpace(string(out)), err
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	return strings.TrimSpace(string(out)), err
}

func command(dir string, env []string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func buildOnly(m, use string) string {
	return `package main

import "github.com/babelqueue/transports/` + m + `"

func main() { ` + use + ` }
`
}

// kafkaProgram publishes one envelope through an in-process kfake cluster
// and consumes it with the runtime, as a small service would.
const kafkaProgram = `package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/babelqueue/transports/core/queue"
	"github.com/babelqueue/transports/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders", "orders.dlq"))
	if err != nil {
		fail(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	snd, err := kafka.NewSender(seeds)
	if err != nil {
		fail(err)
	}
	defer snd.Close(context.Background())
	rcv, err := kafka.NewReceiver(seeds, "service", []string{"orders"}, kafka.WithPollWait(100*time.Millisecond))
	if err != nil {
		fail(err)
	}
	defer rcv.Close(context.Background())
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if _, err := queue.NewPublisher(snd).Publish(ctx, "orders", "urn:babel:orders:created", map[string]any{"order_id": 1}); err != nil {
		fail(err)
	}
	got := ""
	c := queue.NewConsumer(rcv, snd, queue.WithDeadLetter(""), queue.WithLogger(slog.New(slog.DiscardHandler)))
	c.Handle("urn:babel:orders:created", func(_ context.Context, m *queue.Message) error {
		got = string(m.Envelope.Data())
		stop()
		return nil
	})
	if err := c.Run(ctx); err != nil {
		fail(err)
	}
	if got == "" {
		fail(fmt.Errorf("nothing consumed"))
	}
	fmt.Println("published and consumed " + got + " through kfake")
}

func fail(err error) { fmt.Println(err); os.Exit(1) }
`
