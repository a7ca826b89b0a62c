# qn-admission — the two commands a newcomer needs are `make run` and `make test`;
# `make image` is the third, for those who deploy.
SHELL := /usr/bin/env bash
K8S_VERSION ?= v1.36.3
GO ?= go
BIN := bin
# Build tags of every binary we build. nomsgpack leaves gin's MessagePack
# codec (github.com/ugorji/go/codec) out: nothing here speaks MessagePack,
# and without it qn-webhook is 9.5 MB smaller and its RSS 3.5 MiB lower
# (the codec's code and tables are touched at start-up). Plain `go build`
# works too, just larger.
BUILD_TAGS ?= nomsgpack

# What every binary says about itself (--version; internal/version) and the
# images' labels: the release version, the commit and the commit's time.
# The time is the commit's, never the build's, so the same commit builds the
# same bytes (SOURCE_DATE_EPOCH, as reproducible-builds.org names it).
# VERSION is the tag's (v0.2.0 -> 0.2.0) on a tagged commit, else the
# chart's appVersion with -dev-<commit> (between releases Chart.yaml names
# the coming version).
CHART_DIR := charts/qn-admission
APP_VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART_DIR)/Chart.yaml)
CHART_VERSION := $(shell sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART_DIR)/Chart.yaml)
VERSION ?= $(shell v=$$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null) && echo "$$v" | sed 's/^v//' || echo $(APP_VERSION)-dev-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown))
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/quantumnode/qn-admission/internal/version
LDFLAGS := -s -w -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(DATE)
# Static (no cgo: the images have no libc), no file-system paths in the
# binaries (-trimpath), stamped: the same flags for `make build` and the
# images. Go's own VCS stamp is off: it depends on the checkout (a git
# worktree gets none, a clone does), which would give one commit two
# digests; the -X stamps above say the same.
GO_BUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)'

.PHONY: run run-controller test unit e2e k8s-bins chart build lint fmt vet clean rbac

## run: start qn-webhook locally: self-signed TLS on :8443, bundled policies, probes on :8080, rate windows in memory; more flags in ARGS (e.g. ARGS="--window-store redis")
run:
	$(GO) run -tags '$(BUILD_TAGS)' ./cmd/qn-webhook --tls-self-signed --log-format text $(ARGS)

## run-controller: start qn-controller against the current kubeconfig
run-controller:
	$(GO) run -tags '$(BUILD_TAGS)' ./cmd/qn-controller

## test: every test: gofmt, vet, staticcheck, unit tests, then end-to-end tests against a real kube-apiserver (and a real Prometheus for the scaler), the images (test/image), and the chart and images running as Pods on a real one-node cluster (test/cluster)
test: fmt-check vet staticcheck policy-test alerts-test kyverno-parity release-tool-test fuzz-smoke
	@./hack/prometheus.sh >/dev/null
	@./hack/coredns.sh >/dev/null
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" QN_PROMETHEUS="$$(./hack/prometheus.sh)" QN_COREDNS="$$(./hack/coredns.sh)" $(GO) test -race -count=1 -timeout 25m ./...

## alerts-test: the chart's alerts and dashboard checked with Prometheus' rule parser and query engine (test/alerts, a module of its own)
.PHONY: alerts-test
alerts-test:
	cd test/alerts && $(GO) vet ./... && $(GO) test -count=1 ./...

## kyverno-parity: qnctl's answers on Kyverno ClusterPolicies held to Kyverno's own engine, and Kyverno's own CLI test folders run through qnctl test (test/kyvernoparity, a module of its own: Kyverno's engine does not build in ours); the first build compiles Kyverno's engine (about 10.5 min on 2 busy cores, 5.5 min CPU), later runs reuse the build cache (about 20 s); vet, not staticcheck, checks this test-only module: staticcheck's first pass over Kyverno's dependencies costs a cold run 3.5 min more (run it by hand with `cd test/kyvernoparity && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...`)
.PHONY: kyverno-parity
kyverno-parity:
	cd test/kyvernoparity && $(GO) vet ./... && $(GO) test -count=1 ./...

## release-tool-test: vet, staticcheck and the unit tests of hack/release (the image builder, a module of its own)
.PHONY: release-tool-test
release-tool-test:
	cd hack/release && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./... && $(GO) test -count=1 ./...

## policy-test: the bundled policies' Rego unit tests and fixture cases, run by qnctl as a policy author would
.PHONY: policy-test
policy-test:
	$(GO) run ./cmd/qnctl test rego/bundle --fixtures test/fixtures/bundled

## docs-samples: rewrite the qnctl samples of README.md and docs/*.md (and docs/examples/my-policies) from the real qnctl; make test fails when they differ
.PHONY: docs-samples
docs-samples:
	$(GO) test -count=1 ./cmd/qnctl/app -run TestReadmeSamples -update

## bench: in-process benchmarks, then qn-webhook (also with a shadow policy set) vs OPA vs a bare-TLS ceiling over HTTPS; rewrites the load section of docs/benchmarks.md
.PHONY: bench
bench:
	@mkdir -p $(BIN)
	echo "# load average before: $$(cut -d' ' -f1-3 /proc/loadavg)" > $(BIN)/bench-inprocess.txt
	set -o pipefail; $(GO) test -run XXX -bench . -benchtime 2s -count 3 ./policies/ ./policies/shadow/ ./policies/window/ ./policies/dialect/kyverno/ ./policies/dialect/admissionpolicy/ ./webhook/ | tee -a $(BIN)/bench-inprocess.txt
	set -o pipefail; $(GO) test -run XXX -bench . -benchtime 1s -count 3 ./test/load/ | tee -a $(BIN)/bench-inprocess.txt
	echo "# after: $$(cut -d' ' -f1-3 /proc/loadavg)" >> $(BIN)/bench-inprocess.txt
	$(GO) run ./test/load/cmd/qnload --inprocess $(BIN)/bench-inprocess.txt --doc docs/benchmarks.md

## bench-inventory: the cluster inventory's heap with 10,000 QuantumNodes and 5,000 Nodes synced from a real kube-apiserver, and validate CPU for a role that reads it and one that does not (docs/benchmarks.md, "The cluster inventory")
.PHONY: bench-inventory
bench-inventory:
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" $(GO) test -run XXX -bench BenchmarkInventoryMemory -benchtime 1x -timeout 20m ./policies/inventory/
	$(GO) test -run XXX -bench BenchmarkValidate -benchtime 5000x -count 3 ./policies/inventory/

## bench-scalers: the real qn-controller with 1,000 HorizontalQNScalers polled every 15 s against a real Prometheus and kube-apiserver for 3 minutes: CPU of each process, Prometheus' query rate, the controller's API requests (docs/benchmarks.md, "HorizontalQNScaler")
.PHONY: bench-scalers
bench-scalers:
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" QN_PROMETHEUS="$$(./hack/prometheus.sh)" \
	QN_BENCH_SCALERS=$${QN_BENCH_SCALERS:-1000} QN_BENCH_INTERVAL=$${QN_BENCH_INTERVAL:-15} QN_BENCH_DURATION=$${QN_BENCH_DURATION:-3m} \
	$(GO) test -count=1 -v -run '^TestScalerLoad$$' -timeout 30m ./cmd/qn-controller/ | grep -v 'level='

## chart: refresh the chart's copies of the CRD and bundled policies, then render, lint and dry-run it
chart:
	$(GO) generate ./test/chart/
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" $(GO) test -count=1 ./test/chart/

## fuzz: run every Go fuzz target for FUZZTIME each (default 30s; make test runs their seed corpora and make fuzz-smoke); FUZZ_INSTRUMENT=module guides by this module's code only, for 6-27x the executions (docs/reliability.md); FUZZ_TARGETS=./pkg/:FuzzName picks targets
FUZZTIME ?= 30s
FUZZ_INSTRUMENT ?= all
FUZZ_TARGETS ?= ./policies/dialect/kyverno/:FuzzReadAndJudge ./policies/:FuzzScopedPatchMatchesWholeDocument ./policies/:FuzzDirectPatchMatchesJSONPatch ./webhook/:FuzzDecodeAndAnswer ./webhook/:FuzzOnePassDecodingAgrees ./webhook/:FuzzAppendJSONString ./policies/:FuzzInputValueMatchesItsJSONForm ./policies/:FuzzPlannedEvaluationMatchesReference ./policies/:FuzzParseRoleTable ./cmd/qnctl/app/:FuzzEvalInput ./internal/astjson/:FuzzDecodeAgreesWithTheReference ./internal/astjson/:FuzzProjectedDecodingAgrees ./internal/astjson/:FuzzUnquoteMatchesEncodingJSON
.PHONY: fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME), instrumenting $(FUZZ_INSTRUMENT)"; \
		GO="$(GO)" ./hack/fuzz.sh $(FUZZ_INSTRUMENT) $$pkg $$name $(FUZZTIME); \
	done

## fuzz-smoke: every fuzz target for FUZZ_SMOKE_EXECS executions beyond its seed corpus, a few seconds each (part of make test)
# A count, not a time: a time limit can fail spuriously on Go before 1.27
# (go.dev/issue/75804; hack/fuzz.sh).
FUZZ_SMOKE_EXECS ?= 20000x
.PHONY: fuzz-smoke
fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SMOKE_EXECS) FUZZ_INSTRUMENT=module

## soak: the real qn-webhook at SOAK_RATE requests/s (default 200) for SOAK_DURATION (default 30m) with policy pushes and certificate rotations mixed in; 0 errors required
SOAK_DURATION ?= 30m
SOAK_RATE ?= 200
.PHONY: soak
soak:
	SOAK_DURATION=$(SOAK_DURATION) SOAK_RATE=$(SOAK_RATE) $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 0 ./test/soak/

## rbac: regenerate config/rbac/role.yaml from the +kubebuilder:rbac markers of controller/ and its packages, and of cmd/qn-controller/app (the sync heartbeat) (controller-gen of the k8s 0.36 line)
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0
rbac:
	$(CONTROLLER_GEN) rbac:roleName=qn-controller paths="./controller/...;./cmd/qn-controller/app/..." output:rbac:artifacts:config=config/rbac

## cluster-test: only the one-node cluster suite (test/cluster): the chart and our images as Pods under a real kubelet and containerd
.PHONY: cluster-test
cluster-test:
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" QN_COREDNS="$$(./hack/coredns.sh)" $(GO) test -count=1 -v -timeout 20m ./test/cluster/

## k8s-bins: build (once, cached) kube-apiserver, etcd, kubectl, kube-controller-manager, and the node's kube-scheduler, kubelet and kube-proxy; prints their directory
k8s-bins:
	@K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh

## prometheus: build (once, cached) the Prometheus server the scaler's tests query; prints its path (export it as QN_PROMETHEUS)
.PHONY: prometheus
prometheus:
	@./hack/prometheus.sh

## build: qn-webhook, qn-controller and qnctl for this machine into bin/: static, -trimpath, version stamped (--version)
build:
	$(GO_BUILD) -o $(BIN)/ ./cmd/...

## build-platforms: the three binaries for each of PLATFORMS into bin/<os>_<arch>/, as make build builds them, with the Go release go.mod names
PLATFORMS ?= linux/amd64 linux/arm64
IMAGES := qn-webhook qn-controller qnctl
# The images' bytes depend on the compiler (the binaries) and on the Go
# release that runs hack/release (its gzip): both use exactly the release
# go.mod names (its toolchain line, else its go line), so any machine
# builds a release's digests; another local Go fetches that one once from
# the module proxy.
GO_RELEASE := go$(shell v=$$(sed -n 's/^toolchain go//p' go.mod); [ -n "$$v" ] || v=$$(sed -n 's/^go //p' go.mod); echo $$v)
.PHONY: build-platforms
build-platforms:
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%%/*}; arch=$${p#*/}; arch=$${arch%%/*}; \
		echo "GOTOOLCHAIN=$(GO_RELEASE) GOOS=$$os GOARCH=$$arch $(GO_BUILD) -o $(BIN)/$${os}_$${arch}/ $(addprefix ./cmd/,$(IMAGES))"; \
		GOTOOLCHAIN=$(GO_RELEASE) GOOS=$$os GOARCH=$$arch $(GO_BUILD) -o $(BIN)/$${os}_$${arch}/ $(addprefix ./cmd/,$(IMAGES)); \
	done

## image: OCI images of qn-webhook, qn-controller and qnctl for PLATFORMS, offline (no registry, no Docker): one OCI layout each under bin/images/, digests printed
# hack/release is a module of its own (go-containerregistry, the pinned CA
# bundle, the release tools), run with go -C: paths passed to it are absolute.
REGISTRY ?= ghcr.io/quantumnode
IMAGE_DIR ?= $(BIN)/images
SOURCE_URL ?= https://github.com/quantumnode/qn-admission
# The repository has no LICENSE file yet; NOASSERTION is SPDX for "not stated".
IMAGE_LICENSES ?= NOASSERTION
RELEASE_TOOL = GOTOOLCHAIN=$(GO_RELEASE) $(GO) -C hack/release run .
.PHONY: image
image: build-platforms
	$(RELEASE_TOOL) image --binaries '$(abspath $(BIN))' --out '$(abspath $(IMAGE_DIR))' \
		--platforms '$(PLATFORMS)' --names '$(IMAGES)' --registry '$(REGISTRY)' \
		--version '$(VERSION)' --commit '$(COMMIT)' --date '$(DATE)' \
		--source '$(SOURCE_URL)' --licenses '$(IMAGE_LICENSES)'

## release-check: a release of VERSION needs Chart.yaml's version and appVersion to be VERSION
.PHONY: release-check
release-check:
	@if [ "$(VERSION)" != "$(APP_VERSION)" ] || [ "$(VERSION)" != "$(CHART_VERSION)" ]; then \
		echo "release $(VERSION): $(CHART_DIR)/Chart.yaml has version $(CHART_VERSION) and appVersion $(APP_VERSION);" \
			"the commit a release tag points at names the release in both (docs/release.md)"; exit 1; fi

## release-artifacts: everything a release publishes, built offline into bin/release: images for PLATFORMS, checked; SBOMs; the chart pinned to the images' digests
RELEASE_DIR ?= $(BIN)/release
CHART_REGISTRY ?= oci://$(REGISTRY)/charts
TOOLS = hack/release/tools.sh
.PHONY: release-artifacts
release-artifacts: release-check image
	QN_IMAGE_LAYOUT='$(abspath $(IMAGE_DIR))' $(GO) test -count=1 ./test/image/
	rm -rf '$(RELEASE_DIR)' && mkdir -p '$(RELEASE_DIR)/sbom'
	hack/release/sbom.sh '$(IMAGE_DIR)' '$(RELEASE_DIR)/sbom'
	$(RELEASE_TOOL) pin-chart --chart '$(abspath $(CHART_DIR))' --images '$(abspath $(IMAGE_DIR))/images.json' --out '$(abspath $(RELEASE_DIR))/chart/qn-admission'
	"$$($(TOOLS) helm)" lint --strict '$(RELEASE_DIR)/chart/qn-admission'
	"$$($(TOOLS) helm)" package '$(RELEASE_DIR)/chart/qn-admission' --version '$(VERSION)' --app-version '$(VERSION)' -d '$(RELEASE_DIR)'
	hack/release/check-chart.sh "$$($(TOOLS) helm)" '$(RELEASE_DIR)/qn-admission-$(VERSION).tgz' '$(IMAGE_DIR)/images.json' '$(K8S_VERSION)'
	cp '$(IMAGE_DIR)/images.json' '$(RELEASE_DIR)/'
	cd '$(RELEASE_DIR)' && sha256sum qn-admission-$(VERSION).tgz images.json sbom/*.json > SHA256SUMS
	@echo "release $(VERSION) built in $(RELEASE_DIR):" && ls -l '$(RELEASE_DIR)' '$(RELEASE_DIR)/sbom'

## release-dry-run: every step of a release that needs no network, for the version Chart.yaml names; prints what the release workflow would push, sign and attest
.PHONY: release-dry-run
release-dry-run:
	$(MAKE) --no-print-directory release-artifacts VERSION='$(APP_VERSION)'
	hack/release/publish.sh --dry-run '$(IMAGE_DIR)' '$(RELEASE_DIR)' '$(CHART_REGISTRY)'

## release-publish: push, sign and attest what release-artifacts built (the release workflow runs it; needs registry logins and a Sigstore identity)
.PHONY: release-publish
release-publish: release-check
	hack/release/publish.sh '$(IMAGE_DIR)' '$(RELEASE_DIR)' '$(CHART_REGISTRY)'

## version: the version make build and make image stamp in (VERSION)
.PHONY: version
version:
	@echo $(VERSION)

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck is pinned; `go run` builds it once into the module cache.
STATICCHECK_VERSION ?= v0.8.2
.PHONY: staticcheck
staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

clean:
	rm -rf $(BIN)
