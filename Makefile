# The two commands a newcomer needs (README "Quick start"):
#   make run    build the worker and run it on the embedded single-machine default
#   make test   run every test (race detector on)
# Both install what they need first, so they work on a fresh Debian 12 machine with Go 1.26
# as root: make run only what building and running need, make test the rest besides.
# tools/deps.sh installs the missing packages and waits for another apt instead of failing.

GO        ?= go
BIN       := bin
VERSITYGW_VERSION := v1.8.0
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
# Building and running: the C compiler and headers for cgo (gcc, libc6-dev; -race needs
# them too), pkg-config, OpenBLAS (the CPU backend) and libjpeg-turbo (JPEG decoding),
# git (the version stamp below) and make; ca-certificates for Go's module downloads.
RUN_PACKAGES  := gcc libc6-dev pkg-config libopenblas-dev libjpeg62-turbo-dev git make ca-certificates
# The tests alone: libpython and numpy for the ttnn bridge tests, uvicorn for the launcher
# test, python3 for the example producer's test, systemd-analyze for the unit check,
# chromium and a font for the console's browser test (console/browser_test.go).
TEST_PACKAGES := libpython3.11 python3 python3-numpy python3-uvicorn systemd chromium fonts-dejavu-core

.PHONY: run demo test deps run-deps build vet

run-deps:
	@tools/deps.sh --no-recommends $(RUN_PACKAGES)

# make test's: make run's, the tests' packages and the versitygw S3 server the tests start.
deps: run-deps
	@tools/deps.sh $(TEST_PACKAGES)
	@test -x $(GOBIN_DIR)/versitygw || { echo "building versitygw $(VERSITYGW_VERSION) (the S3 server the tests start)"; \
		$(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }

# `worker --version` and `submit --version` print these (package internal/version); a
# build outside git says "unknown" unless VERSION and COMMIT are given. LDFLAGS (and DIST)
# are expanded when a recipe runs, not when make reads this file: on a bare machine git
# is installed by run-deps, after make has read it.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/locateanything/detect/internal/version
LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)

build: run-deps
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/worker ./cmd/worker
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/submit ./cmd/submit

# A release tarball: the two binaries built here, genscenes, the README and the quick start's
# held-out scenes, so that another Debian 12 amd64 machine runs the quick start from one
# download, with neither Go nor a compiler: it needs only Debian's libopenblas0 and
# libjpeg62-turbo (README "From a release tarball").
DIST = locate-anything-$(VERSION)-linux-$(shell $(GO) env GOARCH)
.PHONY: dist
dist: build
	$(GO) build -o $(BIN)/genscenes ./tools/tinymodel/genscenes
	rm -rf dist/$(DIST) && mkdir -p dist/$(DIST)/bin dist/$(DIST)/tools/tinymodel/testdata
	cp $(BIN)/worker $(BIN)/submit $(BIN)/genscenes dist/$(DIST)/bin/
	cp README.md dist/$(DIST)/
	cp -r tools/tinymodel/testdata/heldout tools/tinymodel/testdata/heldout.jsonl dist/$(DIST)/tools/tinymodel/testdata/
	tar -C dist -czf dist/$(DIST).tar.gz $(DIST)
	@echo "dist/$(DIST).tar.gz"

# LA_ENGINE=sim make run: the same on a simulated Blackhole p150a (docs/sim.md).
# /predict, and with it the web console (docs/console.md), stays on loopback unless
# LA_HTTP_ADDR says otherwise.
run: export LA_HTTP_ADDR ?= 127.0.0.1:20000
run: build
	$(BIN)/worker

# The throughput benchmark on the simulated p150a (docs/throughput.md): 1080p JPEG jobs
# with overlays through the embedded NATS and local storage, the serial baseline, batch 1
# and batch 8 on 1 and 4 simulated chips; a table, then one JSON line. LOADTEST_ARGS
# replaces the flags; LA_SIM_* change the cost model (docs/sim.md).
LOADTEST_ARGS ?= --chips 1,4 --batch 1,8 --jobs 128 --overlay
.PHONY: loadtest
loadtest: build
	$(BIN)/worker loadtest $(LOADTEST_ARGS)

# A dozen freshly drawn shape scenes through the worker and submit, scored; overlays land
# in demo-out/. LA_DEMO_SEED=N draws the same scenes again, LA_DEMO_SCENES=N more or fewer.
demo: build
	$(GO) build -o $(BIN)/genscenes ./tools/tinymodel/genscenes
	tools/demo.sh

test: deps
	$(GO) vet ./...
	PATH="$(GOBIN_DIR):$$PATH" $(GO) test -race -timeout 30m ./...
	FUZZTIME=5s GO=$(GO) tools/fuzz.sh

vet:
	gofmt -l . | (! grep .) && $(GO) vet ./...

# Every fuzz target for FUZZTIME each, one after the other (tools/fuzz.sh); make test
# runs the same pass for 5s each.
FUZZTIME ?= 60s
.PHONY: fuzz
fuzz: deps
	FUZZTIME=$(FUZZTIME) GO=$(GO) tools/fuzz.sh

# The chaos suite in its full form (docs/chaos.md): the real worker, nats-server and
# versitygw as processes, under kill -9, SIGSTOP, node and leader loss, SIGTERM, hostile
# jobs and hostile /predict clients, every job accounted for. Its bounded form runs within
# make test (test/chaos is an ordinary package).
.PHONY: chaos soak
chaos: deps
	PATH="$(GOBIN_DIR):$$PATH" CHAOS_FULL=1 $(GO) test -count=1 -timeout 60m -v ./test/chaos/

# The soaks (TestSoak, then TestSoakHostile: hostile producers, see docs/chaos.md):
# CHAOS_SOAK_JOBS (10,000) jobs with faults injected at random about every
# CHAOS_SOAK_FAULT_EVERY (20s); prints jobs, faults, lost, duplicates, p95 latency and the
# worker's RSS growth. CHAOS_SEED=N repeats a schedule.
soak: deps
	PATH="$(GOBIN_DIR):$$PATH" CHAOS_SOAK=1 $(GO) test -count=1 -timeout 4h -run 'TestSoak$$|TestSoakHostile$$' -v ./test/chaos/
