# couchepi build. `make demo` runs minicouch with the replicator; `make test`
# runs every test CI runs. See README.md.

GO        ?= go
BIN       := bin
GOFLAGS   ?= -buildvcs=false
export GOFLAGS

# Packages with goroutines and shared state: tested with -race.
RACE_PKGS := ./host/... ./sdk/... ./plugin/... ./examples/minicouch/...
INTEROP   := test/interop

DEMO_ADDR ?= 127.0.0.1:5984
DEMO_DATA ?= .demo/data
DEMO_USER ?= admin
DEMO_PASS ?= pass

.PHONY: all build zlib-deps test test-modules test-short test-browser test-faults test-upgrade interop-deps browser-deps bench bench-cluster bench-cluster-queue proto lint fuzz demo demo-cluster clean

all: build

build: zlib-deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/minicouch ./examples/minicouch
	$(GO) build -o $(BIN)/replicator ./plugin/cmd/replicator
	$(GO) build -o $(BIN)/docguard ./examples/docguard
	$(GO) build -o $(BIN)/couchrep ./plugin/cmd/couchrep
	cd examples/kivikserver && $(GO) build -o ../../$(BIN)/kivikserver .

# minicouch gzips attachments through the system zlib (cgo) to get
# CouchDB's digests; with a C compiler it needs zlib's headers (Debian's
# zlib1g-dev). Without a C compiler cgo is off and Go's gzip is used.
zlib-deps:
	@if command -v $${CC:-cc} >/dev/null 2>&1 && ! echo '#include <zlib.h>' | $${CC:-cc} -E -x c - >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zlib1g-dev; fi

# npm packages for the interoperability tests (PouchDB, pouchdb-server).
# Optional packages are left out: pouchdb-server's optional SQLite adapter
# would compile sqlite3 with node-gyp (a C toolchain) and nothing uses it.
interop-deps:
	cd $(INTEROP) && npm ci --omit=optional --no-audit --no-fund --loglevel=error

# playwright-core (npm) and Debian's chromium for the Fauxton browser test.
browser-deps:
	cd test/browser && npm ci --no-audit --no-fund --loglevel=error
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# Fauxton, CouchDB's web UI, driven in headless chromium against minicouch;
# screenshots land in artifacts/browser/.
test-browser: build browser-deps
	COUCHEPI_BROWSER_TEST=1 $(GO) test -count=1 -timeout 10m ./test/browser/

test: build interop-deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 15m $$($(GO) list ./... | grep -v -e /host -e /sdk -e /plugin -e /examples/minicouch)
	$(GO) test -count=1 -race -timeout 15m $(RACE_PKGS)
	$(MAKE) test-modules
	$(MAKE) fuzz FUZZTIME=20000x
	$(MAKE) test-browser

# The modules of their own: a standalone plugin (built and loaded by
# docs/plugins_test.go), kivik's x/server with the host, and a round trip
# through minicouch with kivik's client.
MODULES := examples/greeter examples/kivikserver test/kivik
test-modules:
	for m in $(MODULES); do (cd $$m && $(GO) vet ./... && $(GO) test -count=1 -race -timeout 10m ./...) || exit 1; done

# The cluster under faults (about 10 minutes, so not in make test): a
# 3-member etcd, a frontend and two replication nodes with default
# settings, a writer throughout, and kill -9 of a node, SIGSTOP past its
# lease, kill -9 of a plugin, the etcd leader killed, quorum lost for 2
# minutes, a frontend restart; prints a table per fault.
test-faults: build
	COUCHEPI_FAULTS=1 $(GO) test -count=1 -timeout 30m -run '^TestFaults$$' -v ./plugin/e2e/

# A rolling upgrade on one etcd (1.5 to 4 minutes, so not in make test):
# nodes of this version and of the next (a test-only build, tag
# couchepi_nextformat, writing job records of the next format) share a
# queue; no record is ever written back in an older format, and the old
# node leaves the jobs it cannot run. See docs/cluster.md.
test-upgrade: build
	COUCHEPI_UPGRADE=1 $(GO) test -count=1 -timeout 15m -run '^TestE2EMixedVersions$$' -v ./plugin/e2e/

# Quick loop for development: no race detector, no npm.
test-short:
	$(GO) test -short -count=1 ./...

FUZZTIME ?= 60s
# Every Fuzz target in the tree, each run for FUZZTIME. make test gives a
# count (20000x), not a duration: Go 1.26's fuzz coordinator can report a
# spurious "context deadline exceeded" failure when a -fuzztime duration
# ends under CPU load (golang/go#75804, fixed in Go 1.27); a count has no
# deadline to race.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench: build interop-deps
	$(GO) test -run '^$$' -bench . -timeout 60m ./... | tee bench.out

# A real cluster end to end (issue 39): a 3-member etcd, a frontend and
# two (then three) replication minicouch. Prints seconds to start 1,000 and
# 10,000 jobs from _replicator docs, failover of 500 and 5,000 jobs on
# kill -9, handover of 1,000 on SIGTERM, the spread over 3 nodes and etcd's
# requests/s at rest. COUCHEPI_BENCH_BIN=dir runs the binaries of another
# build (before/after); COUCHEPI_BENCH_START, _FAILOVER, _HANDOVER set the
# sizes. See docs/testing.md. About 20 minutes.
bench-cluster:
	COUCHEPI_BENCH_CLUSTER=1 $(GO) test -run '^$$' -bench '^BenchmarkCluster$$' -benchtime 1x -timeout 180m ./plugin/e2e/ | grep -E '^(bench-cluster|  |Benchmark|ok|FAIL|---|panic)'

# The job queue alone on a real 3-member etcd (no job server, frontend or
# replications): the queue's share of bench-cluster's figures. Minutes.
bench-cluster-queue:
	COUCHEPI_BENCH_CLUSTER=1 $(GO) test -run '^$$' -bench '^BenchmarkClusterEtcd$$' -benchtime 1x -timeout 60m -v ./plugin/jobs/ | grep -E '^(Benchmark|    bench_cluster_test|ok|FAIL|---)'

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(CURDIR)/$(BIN)/tools:$$PATH protoc -I hooks --go_out=internal/hookspb --go_opt=paths=source_relative \
	  --go-grpc_out=internal/hookspb --go-grpc_opt=paths=source_relative hooks/hooks.proto

STATICCHECK_VERSION := v0.6.1
lint:
	$(GO) vet ./...
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(BIN)/tools/staticcheck ./...

# minicouch on $(DEMO_ADDR) with the replicator loaded, ready for curl.
demo: build
	@mkdir -p $(DEMO_DATA)
	@test/browser/fauxton.sh .demo/fauxton || echo "Fauxton not fetched; /_utils/ will be missing"
	@echo "starting minicouch: http://$(DEMO_USER):$(DEMO_PASS)@$(DEMO_ADDR)/   Fauxton: http://$(DEMO_ADDR)/_utils/   (ready at 'minicouch listening'; Ctrl-C stops it)"
	$(BIN)/minicouch --addr $(DEMO_ADDR) --data $(DEMO_DATA) --admin $(DEMO_USER):$(DEMO_PASS) --plugin $(BIN)/replicator --fauxton .demo/fauxton

# A 3-member etcd (Debian's etcd-server, installed when missing) and three
# minicouch sharing one job queue: :5984 api_frontend, :5985 and :5986
# replication. See docs/cluster.md.
demo-cluster: build
	@command -v etcd >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server)
	examples/minicouch/demo-cluster.sh

clean:
	rm -rf $(BIN) .demo bench.out
