# qn-admission — the two commands a newcomer needs are `make run` and `make test`.
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

.PHONY: run run-controller test unit e2e k8s-bins chart build lint fmt vet clean rbac

## run: start qn-webhook locally: self-signed TLS on :8443, bundled policies, probes on :8080, rate windows in memory; more flags in ARGS (e.g. ARGS="--window-store redis")
run:
	$(GO) run -tags '$(BUILD_TAGS)' ./cmd/qn-webhook --tls-self-signed --log-format text $(ARGS)

## run-controller: start qn-controller against the current kubeconfig
run-controller:
	$(GO) run -tags '$(BUILD_TAGS)' ./cmd/qn-controller

## test: every test: gofmt, vet, staticcheck, unit tests, then end-to-end tests against a real kube-apiserver (and a real Prometheus for the scaler)
test: fmt-check vet staticcheck policy-test alerts-test fuzz-smoke
	@./hack/prometheus.sh >/dev/null
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" QN_PROMETHEUS="$$(./hack/prometheus.sh)" $(GO) test -race -count=1 -timeout 25m ./...

## alerts-test: the chart's alerts and dashboard checked with Prometheus' rule parser and query engine (test/alerts, a module of its own)
.PHONY: alerts-test
alerts-test:
	cd test/alerts && $(GO) vet ./... && $(GO) test -count=1 ./...

## policy-test: the bundled policies' Rego unit tests and fixture cases, run by qnctl as a policy author would
.PHONY: policy-test
policy-test:
	$(GO) run ./cmd/qnctl test rego/bundle --fixtures test/fixtures/bundled

## bench: in-process benchmarks, then qn-webhook vs OPA vs a bare-TLS ceiling over HTTPS; rewrites the load section of docs/benchmarks.md
.PHONY: bench
bench:
	@mkdir -p $(BIN)
	echo "# load average before: $$(cut -d' ' -f1-3 /proc/loadavg)" > $(BIN)/bench-inprocess.txt
	set -o pipefail; $(GO) test -run XXX -bench . -benchtime 2s -count 3 ./policies/ ./policies/window/ ./webhook/ | tee -a $(BIN)/bench-inprocess.txt
	set -o pipefail; $(GO) test -run XXX -bench . -benchtime 1s -count 3 ./test/load/ | tee -a $(BIN)/bench-inprocess.txt
	echo "# after: $$(cut -d' ' -f1-3 /proc/loadavg)" >> $(BIN)/bench-inprocess.txt
	$(GO) run ./test/load/cmd/qnload --inprocess $(BIN)/bench-inprocess.txt --doc docs/benchmarks.md

## chart: refresh the chart's copies of the CRD and bundled policies, then render, lint and dry-run it
chart:
	$(GO) generate ./test/chart/
	KUBEBUILDER_ASSETS="$$(K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh)" $(GO) test -count=1 ./test/chart/

## fuzz: run every Go fuzz target for FUZZTIME each (default 30s; make test runs their seed corpora and make fuzz-smoke); FUZZ_INSTRUMENT=module guides by this module's code only, for 6-27x the executions (docs/reliability.md); FUZZ_TARGETS=./pkg/:FuzzName picks targets
FUZZTIME ?= 30s
FUZZ_INSTRUMENT ?= all
FUZZ_TARGETS ?= ./policies/:FuzzScopedPatchMatchesWholeDocument ./webhook/:FuzzDecodeAndAnswer ./webhook/:FuzzOnePassDecodingAgrees ./policies/:FuzzInputValueMatchesItsJSONForm ./policies/:FuzzPlannedEvaluationMatchesReference ./policies/:FuzzParseRoleTable ./cmd/qnctl/app/:FuzzEvalInput ./internal/astjson/:FuzzDecodeAgreesWithTheReference
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

## rbac: regenerate config/rbac/role.yaml from the +kubebuilder:rbac markers of controller/ and its packages (controller-gen of the k8s 0.36 line)
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0
rbac:
	$(CONTROLLER_GEN) rbac:roleName=qn-controller paths=./controller/... output:rbac:artifacts:config=config/rbac

## k8s-bins: build (once, cached) kube-apiserver, etcd and kubectl; prints their directory
k8s-bins:
	@K8S_VERSION=$(K8S_VERSION) ./hack/k8s-bins.sh

## prometheus: build (once, cached) the Prometheus server the scaler's tests query; prints its path (export it as QN_PROMETHEUS)
.PHONY: prometheus
prometheus:
	@./hack/prometheus.sh

build:
	$(GO) build -tags '$(BUILD_TAGS)' -o $(BIN)/ ./cmd/...

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
