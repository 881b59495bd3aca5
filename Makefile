# flashgate: `make demo` and `make test` are the two commands a fresh Debian
# machine needs; both install missing servers first (scripts/deps.sh).
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
TEST_TIMEOUT ?= 9m

.PHONY: all deps build test spec fuzz vopr run demo lint bench clean

all: build

deps:
	@scripts/deps.sh

# --version and flashgate_build_info{version,revision}: the version stamped
# here, the revision from Go's VCS stamp (-buildvcs=auto), else stamped here.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILDINFO := github.com/flashgate/flashgate/shared/buildinfo
LDFLAGS := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION)

build:
	$(GO) build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/ledger ./ledger
	$(GO) build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/proxy ./proxy
	$(GO) build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/flashgatectl ./flashgatectl
	$(GO) build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/loadtest ./loadtest

# The whole suite against real redis-server and PostgreSQL processes that the
# tests start on free ports (or REDIS_URL / DATABASE_URL when set). The
# packages that drive the whole system with bursts and faults and judge it by
# latency and 503 bounds run last, one at a time: beside the other packages on
# two CPUs they measured those packages' load, not the system (chaos
# rolling-restart's ledgers answered past LEDGER_TIMEOUT; a 300/s standard
# burst got 503s from database timeouts; 1,000 concurrent reserves on a
# standard voucher took 2.25 s at p99).
SOLO_PKGS := ./proxy ./systemtest ./loadtest/internal/burst ./loadtest/internal/chaos ./loadtest/internal/attack
# Compiled without the checkout's path (as the Dockerfile builds): a clone in
# another directory reuses the build cache instead of compiling every package
# and test binary again (on a 2-core machine, vet 24 s and the test binaries
# 62 s of a new directory's first make test).
test: export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
test: deps
	$(GO) vet ./...
	@GO="$(GO)" scripts/spec.sh
	@if docker compose version >/dev/null 2>&1; then docker compose config -q && echo "docker-compose.yml: valid"; \
	else echo "docker compose not available: skipped checking docker-compose.yml"; fi
	@GO="$(GO)" TEST_TIMEOUT="$(TEST_TIMEOUT)" SOLO_PKGS="$(SOLO_PKGS)" MAKE="$(MAKE)" scripts/test.sh

# Generates a client from shared/api/openapi.yaml with ogen and with
# oapi-codegen (tools of their own module, internal/tools) and fails when
# either refuses it; `make test` runs it (about 5 s with a warm cache).
spec:
	@GO="$(GO)" scripts/spec.sh

# A short real fuzzing run of every target (their seed corpora also run as
# plain tests in `make test`). FUZZTIME=1m make fuzz for a longer one, or a
# count of executions (FUZZTIME=500x, as make test runs it: a count sets no
# deadline for Go 1.26's fuzz coordinator to fail on, golang/go#75804).
FUZZTIME ?= 4s
# Fuzzing processes per target; make test runs one beside the other packages.
FUZZ_WORKERS ?= 2
FUZZ_TARGETS := \
	./shared/voucher:FuzzValidCode ./shared/voucher:FuzzValidOrderID \
	./shared/httpx/decode:FuzzDecodeReserveRequest ./shared/httpx/decode:FuzzDecodeNewVoucher \
	./shared/gate:FuzzDecodeReserve ./shared/gate:FuzzDecodeMeta \
	./shared/gate:FuzzDecodeState ./shared/gate:FuzzDecodeReconcile ./shared/gate:FuzzDecodeUpdate \
	./ledger/internal/sale:FuzzStateMachine
fuzz: deps
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg, $(FUZZTIME))"; \
		scripts/fuzz.sh $$pkg $$name $(FUZZTIME) $(FUZZ_WORKERS); \
	done

# The VOPR (systemtest/vopr_test.go) for longer than `make test` runs it: seeded
# rounds of random operations under injected faults, each checked against
# Postgres's invariants and Redis's agreement, for VOPR_DURATION (consecutive
# seeds from a random one; VOPR_SEED=N starts at N). It reports rounds, seeds,
# operations and faults at the end, and each failure with its seed.
# VOPR_TIMEOUT is go test's -timeout: keep it above VOPR_DURATION plus a minute.
# VOPR_RUN picks the VOPR: TestVOPR$ (default), TestVOPRLog$ (writePath log
# vouchers: two ledgers in one consumer group, held consumption, broker
# outages, kill -9; systemtest/vopr_log_test.go) or 'TestVOPR$|TestVOPRLog$'
# (both at once, each for VOPR_DURATION). `make test` runs the short version
# of both.
VOPR_DURATION ?= 10m
VOPR_TIMEOUT ?= 2h
VOPR_RUN ?= TestVOPR$$
vopr: deps
	VOPR_SEED=$(VOPR_SEED) $(GO) test -count=1 -timeout $(VOPR_TIMEOUT) ./systemtest/ -run '$(VOPR_RUN)' -v -vopr.duration $(VOPR_DURATION)

# The stack in the foreground on throwaway servers: Ctrl-C stops and cleans up.
# It takes free ports (PROXY_ADDR=127.0.0.1:8080 LEDGER_ADDR=127.0.0.1:8081 to
# choose), a random admin token (RUN_FLAGS='--token T' to choose), and writes
# them to bin/run.env (mode 0600, removed when it stops) for another shell to
# source. Any other service setting on the command line reaches both services
# (make exports it): make run CHECKOUT_TOKEN_SECRET=k1:... RESERVATION_TTL=2m.
PROXY_ADDR ?=
LEDGER_ADDR ?=
RUN_FLAGS ?=
# They reach loadtest as flags; in its environment it would note them ignored.
unexport PROXY_ADDR LEDGER_ADDR RUN_FLAGS
run: deps build
	bin/loadtest run --proxy-addr '$(PROXY_ADDR)' --ledger-addr '$(LEDGER_ADDR)' --env-file bin/run.env $(RUN_FLAGS)

# A flash sale on throwaway servers: 20,000 requests at 5,000/s for 1,000 uses,
# checked against Postgres and Redis; prints the figures and the report's path.
# Postgres is durable (fsync on): every 201 it prints is on disk. DEMO_FLAGS=
# make demo for the fsync-off dev speed.
DEMO_FLAGS ?= --durable
demo: deps build
	bin/loadtest demo $(DEMO_FLAGS)

lint:
	$(GO) vet ./...
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -version >/dev/null 2>&1; then \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...; \
	else echo "staticcheck could not be installed from the module proxy; ran go vet only"; fi

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
