# mccr — make targets. `make demo` and `make test` are the two a newcomer needs.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

GO ?= go
K8S_VERSION ?= 1.37.1
# Where the kube-apiserver and etcd binaries built from Go modules are cached.
KUBEBINS_DIR ?= $(CURDIR)/bin/k8s/$(K8S_VERSION)-$(shell $(GO) env GOOS)-$(shell $(GO) env GOARCH)

# Honour a KUBEBUILDER_ASSETS that already holds usable binaries; otherwise use
# (and build when missing) our cache.
ifeq ($(and $(KUBEBUILDER_ASSETS),$(wildcard $(KUBEBUILDER_ASSETS)/kube-apiserver),$(wildcard $(KUBEBUILDER_ASSETS)/etcd)),)
ASSETS := $(KUBEBINS_DIR)
ASSETS_DEP := $(KUBEBINS_DIR)/kube-apiserver $(KUBEBINS_DIR)/etcd
else
ASSETS := $(KUBEBUILDER_ASSETS)
ASSETS_DEP :=
endif
export KUBEBUILDER_ASSETS := $(ASSETS)

# PROGRESS runs a long step and prints a line whenever it has been quiet for
# 30 s, so that no step of a first run is a silent minute.
PROGRESS := $(CURDIR)/hack/progress.sh

TEST_TIMEOUT ?= 40m
TEST_FLAGS ?=
# Each test package starts its own fleet of API servers; keep at most two
# packages (each with its fleet) running at once on a small machine.
TEST_P ?= 2

.PHONY: all
all: build

.PHONY: help
help: ## Show targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## Compile every package and sample.
	$(GO) build ./...

.PHONY: kubebins
kubebins: $(ASSETS_DEP) ## Build kube-apiserver and etcd from Go modules (cached in bin/k8s).
	@echo "KUBEBUILDER_ASSETS=$(ASSETS)"

# Both binaries come from one wrapper module (hack/kubebins) whose replace
# directives never reach the library's go.mod. Built into a temp dir and moved
# into place, so an interrupted build never leaves a half-written binary cached.
# `go build -v` names each package it compiles (about 2,200 from a cold
# cache); hack/progress.sh counts them into a line every 30 s.
$(KUBEBINS_DIR)/kube-apiserver $(KUBEBINS_DIR)/etcd &:
	@echo ">> Building kube-apiserver v$(K8S_VERSION) and etcd v3.7.0 from Go modules into $(KUBEBINS_DIR)."
	@echo "   This happens once: later runs reuse them (or KUBEBUILDER_ASSETS, when it holds both)."
	@echo "   The first time it takes about 5-20 minutes on 2 cores (plus downloading ~130 MB of"
	@echo "   modules if they are not cached); a line every 30 s says how far it got."
	@mkdir -p $(KUBEBINS_DIR)
	@tmp=$$(mktemp -d $(KUBEBINS_DIR)/.build.XXXXXX); \
	cd hack/kubebins && \
	CGO_ENABLED=0 $(PROGRESS) -c '^[^[:space:]:]+$$' -n 'packages compiled (about 2,200 from a cold cache)' -h \
		-w 'building kube-apiserver and etcd' -- \
		$(GO) build -v -trimpath -o $$tmp/ \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$(K8S_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
		k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3 && \
	mv $$tmp/server $$tmp/etcd && \
	mv $$tmp/kube-apiserver $$tmp/etcd $(KUBEBINS_DIR)/ && rmdir $$tmp
	@echo ">> kube-apiserver and etcd are in $(KUBEBINS_DIR)."

# DEMO_FLAGS=--wait keeps the fleet running after the tour, until Ctrl-C.
DEMO_FLAGS ?=

.PHONY: demo
demo: kubebins ## Start a local fleet (a host and 4 members) and show a controller following it; cleans up on exit.
	@echo ">> Compiling the demo (go build ./sample/demo; about 1-3 minutes the first time, seconds after)."
	@mkdir -p $(BIN_DIR)
	@$(PROGRESS) -w 'compiling the demo' -- $(GO) build -o $(BIN_DIR)/mccr-demo ./sample/demo
	$(BIN_DIR)/mccr-demo $(DEMO_FLAGS)

# Tools pinned in hack/tools/go.mod, built into bin/ on first use (and
# again whenever that go.mod changes).
TOOLS_DIR := $(CURDIR)/hack/tools
BIN_DIR := $(CURDIR)/bin
CONTROLLER_GEN := $(BIN_DIR)/controller-gen
GOLANGCI_LINT := $(BIN_DIR)/golangci-lint

$(CONTROLLER_GEN): $(TOOLS_DIR)/go.mod $(TOOLS_DIR)/go.sum
	@echo ">> Building controller-gen into bin/ (once; about a minute the first time)."
	@mkdir -p $(BIN_DIR)
	@cd $(TOOLS_DIR) && $(PROGRESS) -w 'building controller-gen' -- $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): $(TOOLS_DIR)/go.mod $(TOOLS_DIR)/go.sum
	@echo ">> Building golangci-lint into bin/ (once; about 1-3 minutes the first time on 2 cores)."
	@mkdir -p $(BIN_DIR)
	@cd $(TOOLS_DIR) && $(PROGRESS) -w 'building golangci-lint' -- $(GO) build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Build the pinned tools (controller-gen, golangci-lint) into bin/.

# What `make generate` writes; generate-check compares them before and after.
GENERATED := apis/kubefed/v1beta1/zz_generated.deepcopy.go apis/kubefed/crd

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy functions and CRD manifests from the API types.
	$(CONTROLLER_GEN) object paths=./apis/... crd:crdVersions=v1 paths=./apis/... output:crd:artifacts:config=apis/kubefed/crd

.PHONY: generate-check
generate-check: generate ## Fail when generated files are stale (make generate changes them).
	@out=$$(git status --porcelain -- $(GENERATED)); if [ -n "$$out" ]; then \
		echo "generated files are stale; run make generate and commit:"; echo "$$out"; git --no-pager diff -- $(GENERATED); exit 1; fi

.PHONY: tidy-check
tidy-check: ## Fail when go.mod/go.sum of the library or the tools module are not tidy.
	$(GO) mod tidy -diff
	cd $(TOOLS_DIR) && $(GO) mod tidy -diff

.PHONY: lint-go
lint-go: $(GOLANGCI_LINT) tidy-check generate-check ## golangci-lint (config: .golangci.yml), go mod tidy -diff, generated files up to date.
	@echo ">> golangci-lint run ./... (a few minutes without its cache, under a minute with it)"
	@$(PROGRESS) -w 'golangci-lint' -- $(GOLANGCI_LINT) run ./...

# usercheck builds a throwaway module that imports every public package of
# mccr (replaced by this checkout) and runs go mod tidy, go build and go vet
# in it, as a user's module would. It needs no network once the module cache
# holds the dependencies.
.PHONY: usercheck
usercheck: ## Check that a user module importing every public package tidies, builds and vets.
	@echo ">> usercheck: a throwaway module importing every public package must tidy, build and vet (about 1-2 minutes)"
	@$(PROGRESS) -w 'usercheck' -- ./hack/usercheck.sh

.PHONY: vet
vet: ## go vet the library.
	@echo ">> go vet ./... (a minute or two the first time, while it compiles)"
	@$(PROGRESS) -w 'go vet' -- $(GO) vet ./...

.PHONY: lint
lint: vet lint-go ## gofmt, go vet, golangci-lint, go mod tidy -diff, generated files up to date (make test runs it).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The browser tests open the fleet page in Debian's chromium, or in the
# Chromium that $CHROMIUM names (then nothing is installed).
CHROMIUM ?= /usr/bin/chromium
# Test artefacts (the fleet page's screenshot) are kept here.
MCCR_ARTIFACTS ?= $(CURDIR)/bin/artifacts
export MCCR_ARTIFACTS

.PHONY: browser
browser: ## Install Debian's chromium (for the fleet page's browser test) when /usr/bin/chromium is missing.
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	echo ">> $(CHROMIUM) is missing: installing Debian's chromium with apt-get (once; about 1-3 minutes)"; \
	$(PROGRESS) -w 'installing chromium' -- $$sudo apt-get update && \
	DEBIAN_FRONTEND=noninteractive $(PROGRESS) -w 'installing chromium' -- $$sudo apt-get install -y --no-install-recommends chromium

.PHONY: test
test: $(ASSETS_DEP) browser lint usercheck ## Build API-server binaries if missing, install chromium if missing, lint, check a user module, and run every test with -race.
	@pkgs=$$($(GO) list ./... | grep -v /test/e2e); n=$$(wc -w <<< "$$pkgs"); \
	echo ">> go test -race: $$n packages (all but test/e2e), $(TEST_P) at a time; a line per package as it ends"; \
	echo "   (compiling takes a few minutes the first time; ./server and ./sample run several minutes each)"; \
	$(PROGRESS) -w 'go test -race' -c '^(ok|FAIL)[[:space:]]' -n "of $$n packages done" -- \
		$(GO) test -race -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $$pkgs
	@# The end-to-end fault suite prints the figures it measured (lines with "figure:").
	@mkdir -p bin
	@echo ">> go test -race ./test/e2e/: the end-to-end fault suite (about 5-10 minutes; its output goes to bin/e2e.out)"
	@$(PROGRESS) -w 'end-to-end suite' -- $(GO) test -race -v -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./test/e2e/ > bin/e2e.out || { cat bin/e2e.out; exit 1; }
	@grep -E '^(--- |ok|FAIL|PASS)|figure:' bin/e2e.out

.PHONY: test-short
test-short: $(ASSETS_DEP) ## Quick run: skips the slow fault/scale parts.
	$(GO) test -race -short -p $(TEST_P) ./...

# Native fuzz targets, as package:FuzzName, each fed with outside data
# through the entry point that takes it. `make test` runs their seed corpora
# (f.Add and <package>/testdata/fuzz/<FuzzName>/) as ordinary tests.
FUZZ_TARGETS ?= \
	internal/yamlshape:FuzzCheck \
	config:FuzzValidateName \
	config:FuzzLoadKubeconfig \
	config:FuzzLoadFile \
	config:FuzzLoadDirectory \
	configwatcher:FuzzSecretKubeconfig \
	configwatcher:FuzzArgoCDSecret \
	configwatcher:FuzzClusterProfile \
	configwatcher:FuzzAccessProviders \
	configwatcher:FuzzKubeFedCluster \
	configwatcher:FuzzClusterAPICluster \
	server/internal/namefuzz:FuzzAddName
FUZZTIME ?= 30s
# FUZZ_FLAGS adds go test flags, e.g. -parallel 2 on a shared machine.
# Minimizing a new crasher for long stalls a run on a small machine.
FUZZ_FLAGS ?= -fuzzminimizetime 10s

.PHONY: fuzz
fuzz: ## Fuzz each of FUZZ_TARGETS for FUZZTIME (default 30s), one after another; a crasher is written to <package>/testdata/fuzz/<FuzzName>/.
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzzing $${t#*:} in ./$${t%%:*}/ for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) ./$${t%%:*}/ || exit 1; \
	done

# soak repeats the sharding fault runs at length: 5-minute host outages
# (refused and hung), a minute of lost answers, and 2,000 random fault
# schedules of the replica simulation. Each 5-minute outage case takes about
# 6 minutes; the whole target is long (tens of minutes per SOAK_COUNT).
SOAK_COUNT ?= 3
.PHONY: soak
soak: $(ASSETS_DEP) ## Long and repeated sharding fault runs (MCCR_SOAK=1): 5-minute host outages, 2000 random fault schedules.
	MCCR_SOAK=1 $(GO) test -race -count=1 -timeout 30m -run 'TestSimChaos|TestSimHostOutage' ./internal/shard/
	MCCR_SOAK=1 $(GO) test -race -p 1 -count=$(SOAK_COUNT) -timeout 150m -run 'TestSharding' ./server/

BENCH_COUNT ?= 5
BENCH_PKGS ?= ./test/ ./client/ ./server/ ./test/e2e/
# The 1,000-cluster fleet runs on real API servers and the 1,000- and
# 10,000-cluster runs on fake ones take a minute or two each:
# BENCH_LARGE_COUNT of them (0 leaves them out).
BENCH_LARGE_COUNT ?= 3
BENCH_LARGE = ^Benchmark(Fleet|FakeFleet)$$/^clusters=(1000|10000)$$
BENCH_CMD = $(GO) test -p 1 -run '^$$' -bench . -skip '$(BENCH_LARGE)' -benchmem -count $(BENCH_COUNT) -timeout 60m $(BENCH_PKGS)
BENCH_LARGE_CMD = $(GO) test -run '^$$' -bench '$(BENCH_LARGE)' -benchmem -count $(BENCH_LARGE_COUNT) -timeout 60m ./test/e2e/
BENCH_ALL_CMD = $(BENCH_CMD)$(if $(filter-out 0,$(BENCH_LARGE_COUNT)), && $(BENCH_LARGE_CMD))

.PHONY: bench
bench: $(ASSETS_DEP) ## Run the benchmarks (medians of BENCH_COUNT runs) into docs/benchmarks.md.
	@mkdir -p docs bin
	{ $(BENCH_ALL_CMD); } | tee bin/bench.out
	$(GO) run ./hack/benchdoc -cmd "$(BENCH_ALL_CMD)" -notes docs/benchmarks-notes.md < bin/bench.out > docs/benchmarks.md
	@echo "wrote docs/benchmarks.md"

.PHONY: clean
clean: ## Remove built binaries.
	rm -rf bin
