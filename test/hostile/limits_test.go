package hostile

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestEightLargestValidUpdatesAtOnce sends eight UPDATEs at once of the
// largest QuantumNode an API server would pass: 256 services with
// 63-character names, 250 KiB of annotations (the API server allows 256 KiB)
// and 4,000 labels, as object and oldObject. Memory stays under 128 MiB.
func TestEightLargestValidUpdatesAtOnce(t *testing.T) {
	manyAtOnce(t, "/validate", 8, rssLimit, 1, 250<<10, 4000)
}

// TestEightCraftedReviewsAtEveryLimitAtOnce: eight reviews at once that
// only a forger sends (6.2 MiB, just under the byte limit, with 16,000
// labels, near the element limit) stay under three quarters of the chart's
// 256 MiB limit when the Go runtime has the soft limit qn-webhook gives
// itself in a container (GOMEMLIMIT here, as no cgroup limits this test).
// Measured: about 130 MiB with a 96 MiB soft limit, 218 MiB without one.
func TestEightCraftedReviewsAtEveryLimitAtOnce(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "96MiB")
	manyAtOnce(t, "/validate", 8, 192<<20, 12, 256<<10, 8000)
}

// TestEightCraftedMutationsAtOnceStayInsideTheChartsLimit: crafted reviews
// on /mutate, whose decoded copies cost more, sixteen at once, with the
// memory settings the chart gives (a 256 MiB container: GOMEMLIMIT=192MiB).
// A count of concurrent reviews did not bound their bytes (eight took
// 216-298 MiB); the request bytes in flight do, so sixteen cost what eight
// do and reviews beyond the byte budget wait or get a clear 429. The bound
// is the container's limit less 24 MiB for what is not Go's heap: the soft
// limit is where the collector aims, and with GOGC=400 the heap reaches it
// by design (121-185 MiB measured, the top on a machine at load 20).
func TestEightCraftedMutationsAtOnceStayInsideTheChartsLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "192MiB")
	manyAtOnce(t, "/mutate", 16, 232<<20, 12, 256<<10, 8000)
}

func manyAtOnce(t *testing.T, path string, concurrent int, bound uint64, annotationCount, annotationBytes, labelCount int) {
	s := start(t)
	// Annotations make up the bytes (the API server allows 256 KiB of them
	// per object; a schema-less review can carry more), labels the elements.
	annotations := map[string]string{}
	for i := range annotationCount {
		annotations[fmt.Sprintf("pad-%d", i)] = strings.Repeat("a", annotationBytes)
	}
	obj := node("edge-1", annotations, services(256))
	labels := map[string]any{}
	for i := range labelCount {
		key := fmt.Sprintf("l%d-", i)
		if labelCount > 4000 { // short labels: many elements, few bytes
			labels[key] = "v"
			continue
		}
		labels[key+strings.Repeat("k", 63-len(key))] = strings.Repeat("v", 63)
	}
	obj["metadata"].(map[string]any)["labels"] = labels
	body := review("limits", "alice", "UPDATE", obj)
	// oldObject: the same object again.
	body = []byte(strings.Replace(string(body), `"operation":"UPDATE",`, `"operation":"UPDATE","oldObject":`+string(mustObjectJSON(obj))+`,`, 1))
	if len(body) > 7<<20 {
		t.Fatalf("the review is %d bytes, over the 7 MiB limit; shrink the padding", len(body))
	}
	codes := map[int32]int{}
	for _, r := range s.postConcurrently(concurrent, func(int) string { return path }, body) {
		codes[r.code()]++
		overloaded := r.status == 429 && strings.Contains(r.message(), "overloaded")
		if (r.status != 200 || r.code() == 0) && !overloaded {
			t.Errorf("want an answer or a clear 429, got HTTP %d %.300s", r.status, r.raw)
		}
	}
	s.normalStillWorks()
	st := s.memoryUnder(bound)
	t.Logf("%d concurrent %.1f MiB reviews on %s of 2×(256 services, %d labels, %d KiB of annotations): answers by code %v; RSS %.1f MiB, peak %.1f MiB, anonymous peak %.1f MiB", concurrent, float64(len(body))/(1<<20), path, len(labels), annotationCount*annotationBytes>>10, codes, mib(st.RSS), mib(st.HWM), mib(s.peakAnon.Load()))
}

// TestRepeatedServiceValuesAreJudgedWithinTheDeadline: only a direct caller
// sends more than the CRD's 256 services; with every service repeating one
// port (or one name), the duplicate rules used to be quadratic: 1,000
// services 0.15 s, 2,000 0.49 s, 3,000 past the 1 s deadline (a 500).
// 6,000 of each shape (near the 20,000 JSON elements a review may hold)
// are judged, and refused with a 403 that names the clash, under a 3 s
// deadline: quadratic rules would need about 4.4 s, the n log n ones take
// a few hundred milliseconds, so a loaded machine does not fail the test
// and a quadratic rule still does.
func TestRepeatedServiceValuesAreJudgedWithinTheDeadline(t *testing.T) {
	s := start(t, "--policy-eval-timeout=3s")
	const n = 6000
	for name, svc := range map[string]func(i int) map[string]any{
		"one port":          func(i int) map[string]any { return map[string]any{"name": fmt.Sprintf("s%d", i), "port": 8080} },
		"one name":          func(i int) map[string]any { return map[string]any{"name": "web", "port": 1 + i} },
		"one name and port": func(int) map[string]any { return map[string]any{"name": "web", "port": 8080} },
	} {
		svcs := make([]any, n)
		for i := range svcs {
			svcs[i] = svc(i)
		}
		began := time.Now()
		r := s.post("/validate", review("repeated", "alice", "CREATE", node("edge-1", nil, svcs)))
		took := time.Since(began)
		if r.status != 200 || r.review.Response.Allowed || r.code() != 403 || !strings.Contains(r.message(), fmt.Sprintf("is declared %d times", n)) {
			t.Fatalf("%s for %d services: want a 403 naming the clash, got HTTP %d after %s: %.900s", name, n, r.status, took, r.raw)
		}
		t.Logf("%s for %d services: 403 in %s", name, n, took)
	}
	s.normalStillWorks()
	s.memory()
}

// TestManyRequestersShowInTheWindowStoreMetrics: each forged username is a
// window key of the in-process store; their number (bounded by the
// store's cap) and the evictions are on /metrics, where they used to be
// invisible.
func TestManyRequestersShowInTheWindowStoreMetrics(t *testing.T) {
	s := start(t)
	const users = 300
	for i := range users {
		r := s.post("/validate", review(fmt.Sprintf("user-%d", i), fmt.Sprintf("forged-%d", i), "CREATE", node("edge-1", nil, services(1))))
		if r.status != 200 || !r.review.Response.Allowed {
			t.Fatalf("review %d: HTTP %d %.300s", i, r.status, r.raw)
		}
	}
	// normalStillWorks' own user adds one more key.
	s.normalStillWorks()
	if keys := s.metric(`qn_window_store_keys{store="memory"}`); keys != users+1 {
		t.Fatalf("qn_window_store_keys = %v after %d distinct requesters and one more, want %d", keys, users, users+1)
	}
	if v := s.metric(`qn_window_store_evictions_total{reason="active",store="memory"}`); v != 0 {
		t.Fatalf("active evictions = %v far below the cap, want 0", v)
	}
}
