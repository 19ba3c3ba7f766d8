# BabelQueue Go transports. Every target runs over every module of go.work.
#
#   make test          unit, integration and conformance tests, -race, one
#                      module at a time, ending with a summary of what
#                      skipped and why (Kafka on
#                      kfake; SQS on the local server if scripts/sqs-server.sh
#                      installed it, else those tests skip; Pulsar when
#                      BQ_PULSAR_URL names a broker, else those tests skip;
#                      Service Bus on the AMQP test server when Debian's
#                      python3-qpid-proton is installed, else those skip)
#   make conformance   conformance tests against the project's suite, and
#                      against CONFORMANCE_DIR too when it is set
#   make bench         benchmarks of every module, summarised by benchstat
#   make bench-peers   this project against Watermill and the raw native
#                      clients on the same servers, as a table of ratios
#                      (PEERS_KAFKA=1 adds a real Kafka broker)
#   make lint          gofmt, go vet and staticcheck
#   make fuzz          the codec's fuzz targets for FUZZTIME each (default 1m;
#                      a count such as 500000x is what CI uses, since a
#                      duration can end in a spurious "context deadline
#                      exceeded" on Go 1.26, golang/go#75804): round trips,
#                      Decode against encoding/json, and NewEncoded against
#                      New + Encode
#   make tidy          go mod tidy in every module, each on its own
#   make release-check build each module's zip as the module proxy serves it
#                      into a file GOPROXY, build a scratch service against
#                      it (Kafka: publish and consume through kfake), and
#                      diff each module's API with its previous tag
#   make standalone    vet and test every module outside the workspace
#                      (GOWORK=off, -mod=readonly), as its users would
#   make demo          the Kafka demo on an embedded kfake cluster
#   make faults        the fault suite on every server it can start (Kafka on
#                      kfake and on a real broker it starts, killed and
#                      restarted mid-consume), printed as one table
#   make tag MODULE=kafka VERSION=v0.2.0   tag one module for release

MODULES     := core conformance kafka sqs pulsar azureservicebus otel cmd/bq idempotency/redis idempotency/postgres outbox/postgres examples benchmarks tools
PKGS        := $(addsuffix /...,$(addprefix ./,$(MODULES)))
GO          ?= go
TOOLS       := $(CURDIR)/.tools
STATICCHECK := $(TOOLS)/staticcheck
BENCHSTAT   := $(TOOLS)/benchstat
FUZZTIME    ?= 1m
BENCHCOUNT  ?= 6
BENCHTIME   ?= 1s
CONFORMANCE_DIR ?=

export GOFLAGS := -buildvcs=false

.PHONY: test conformance bench bench-peers lint fuzz tidy demo tag tools faults standalone release-check

test:
	@scripts/test.sh $(MODULES)

conformance:
	$(GO) test -count=1 -run 'Conformance' $(PKGS)
ifneq ($(CONFORMANCE_DIR),)
	BQ_CONFORMANCE_DIR=$(abspath $(CONFORMANCE_DIR)) $(GO) test -count=1 -run 'Conformance' $(PKGS)
	@echo "blocks skipped against $(CONFORMANCE_DIR):"
	@BQ_CONFORMANCE_DIR=$(abspath $(CONFORMANCE_DIR)) $(GO) test -count=1 -run 'Conformance' -v $(PKGS) | grep -E -- '--- SKIP' || echo "  none"
endif

$(STATICCHECK):
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

$(BENCHSTAT):
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

tools: $(STATICCHECK) $(BENCHSTAT)

lint: $(STATICCHECK)
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

fuzz:
	cd core && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .
	cd core && $(GO) test -run '^$$' -fuzz '^FuzzDecodeOracle$$' -fuzztime $(FUZZTIME) .
	cd core && $(GO) test -run '^$$' -fuzz '^FuzzNewEncoded$$' -fuzztime $(FUZZTIME) .

# Micro-benchmarks run for BENCHTIME; the Kafka end-to-end benchmarks, which
# publish b.N messages ahead, run a fixed count (BENCH_E2E and friends).
BENCH_E2E ?= 5000x
BENCH_SQS_E2E ?= 2000x
BENCH_PULSAR_E2E ?= 5000x
BENCH_ASB_E2E ?= 2000x
bench: $(BENCHSTAT)
	@rm -f bench.txt
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./core/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Project|Reconcile' -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./kafka/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Produce|Consume|Latency' -benchmem -count 3 -benchtime $(BENCH_E2E) ./kafka/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Attributes|Reconcile' -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./sqs/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Publish|Consume' -benchmem -count 3 -benchtime $(BENCH_SQS_E2E) ./sqs/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Project' -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./pulsar/... | tee -a bench.txt
	@if [ -n "$$BQ_PULSAR_URL" ]; then \
		$(GO) test -run '^$$' -bench 'Publish|Consume|VsRaw' -benchmem -count 3 -benchtime $(BENCH_PULSAR_E2E) ./pulsar/... | tee -a bench.txt; \
	else echo "BQ_PULSAR_URL unset: Pulsar end-to-end benchmarks skipped (scripts/pulsar-server.sh start)"; fi
	$(GO) test -run '^$$' -bench 'Project|Reconcile' -benchmem -count $(BENCHCOUNT) -benchtime $(BENCHTIME) ./azureservicebus/... | tee -a bench.txt
	$(GO) test -run '^$$' -bench 'Publish|Consume|VsRaw' -benchmem -count 3 -benchtime $(BENCH_ASB_E2E) ./azureservicebus/... | tee -a bench.txt
	$(BENCHSTAT) bench.txt

bench-peers:
	@scripts/bench-peers.sh

tidy:
	scripts/tidy.sh $(MODULES)

faults:
	@scripts/faults.sh

standalone:
	@scripts/standalone.sh $(MODULES)

# VERSIONS="kafka=v0.2.0,core=v0.2.0" and BASE=<git rev> are optional.
release-check:
	$(GO) run ./tools/releasecheck $(if $(VERSIONS),-version $(VERSIONS)) $(if $(BASE),-base $(BASE))

demo:
	$(GO) run ./examples/kafkademo

# make tag MODULE=kafka VERSION=v0.2.0, or several in one call, tagged in
# dependency order: make tag TAGS="core v0.2.0 kafka v0.2.0"
tag:
	@scripts/tag.sh $(if $(TAGS),$(TAGS),$(MODULE) $(VERSION))
