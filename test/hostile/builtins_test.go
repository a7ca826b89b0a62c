package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowBuiltinPolicy builds ten million numbers in one built-in call for an
// object labelled slow=yes: seconds of work and more than a gigabyte when
// nothing stops it (docs/reliability.md).
const slowBuiltinPolicy = `
deny contains "never" if {
	object.get(input.request.object, ["metadata", "labels", "slow"], "") == "yes"
	count(numbers.range(1, 10000000)) == 0
}
`

// TestSlowBuiltinsStopAtTheirDeadline: four reviews whose policy calls a
// long built-in, at once, under the chart's settings (a 256 MiB container,
// so GOMEMLIMIT=192MiB): each is answered 500 at its 1s deadline, ordinary
// reviews sent meanwhile are all judged (none refused for overload), and
// the process stays under the container's limit.
func TestSlowBuiltinsStopAtTheirDeadline(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "192MiB")
	dir := filepath.Join(t.TempDir(), "policies")
	copyBundle(t, dir)
	src, err := os.ReadFile(filepath.Join(dir, "quantumnode.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "quantumnode.rego"), string(src)+slowBuiltinPolicy)
	s := start(t, "--policy-dir", dir, "--policy-eval-timeout", "1s")

	slowObj := node("edge-slow", nil, services(1))
	slowObj["metadata"].(map[string]any)["labels"] = map[string]string{"slow": "yes"}
	const slow, ordinary = 4, 21
	var wg sync.WaitGroup
	slowTook := make([]time.Duration, slow)
	slowReplies := make([]reply, slow)
	slowErrs := make([]error, slow)
	for i := range slow {
		wg.Go(func() {
			began := time.Now()
			slowReplies[i], slowErrs[i] = s.trySend("POST", "/validate", "application/json",
				strings.NewReader(string(review(fmt.Sprintf("slow-%d", i), "alice", "CREATE", slowObj))))
			slowTook[i] = time.Since(began)
		})
	}
	// Ordinary reviews while the slow ones run, a few at a time.
	ordinaryReplies := make([]reply, ordinary)
	ordinaryErrs := make([]error, ordinary)
	time.Sleep(50 * time.Millisecond)
	for i := range ordinary {
		wg.Go(func() {
			ordinaryReplies[i], ordinaryErrs[i] = s.trySend("POST", "/validate", "application/json",
				strings.NewReader(string(review(fmt.Sprintf("ordinary-%d", i), "bob", "CREATE", node(fmt.Sprintf("edge-%d", i), nil, services(2))))))
		})
		time.Sleep(40 * time.Millisecond)
	}
	wg.Wait()
	for i, r := range slowReplies {
		if slowErrs[i] != nil {
			t.Fatal(slowErrs[i])
		}
		if r.review.Response.Allowed || r.code() != 500 || !(strings.Contains(r.message(), "deadline") || strings.Contains(r.message(), "memory limit")) {
			t.Errorf("slow review %d: want a 500 denial naming the deadline or the memory guard, got HTTP %d %.300s", i, r.status, r.raw)
		}
		// The deadline is 1s; unstopped, four at once ran 16-21s. The
		// bound leaves room for a loaded machine.
		if slowTook[i] > 4*time.Second {
			t.Errorf("slow review %d answered after %s: the built-in ran past its 1s deadline", i, slowTook[i])
		}
	}
	for i, r := range ordinaryReplies {
		if ordinaryErrs[i] != nil {
			t.Fatal(ordinaryErrs[i])
		}
		if !r.review.Response.Allowed {
			t.Errorf("ordinary review %d was not admitted while slow policies ran: HTTP %d code %d %.300s", i, r.status, r.code(), r.raw)
		}
	}
	s.normalStillWorks()
	st := s.memoryUnder(256 << 20)
	t.Logf("4 slow built-ins at once answered in %v; %d ordinary reviews meanwhile all admitted; RSS %.1f MiB, peak %.1f MiB",
		slowTook, ordinary, mib(st.RSS), mib(st.HWM))
}
