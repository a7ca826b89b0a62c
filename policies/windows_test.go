package policies

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/test/redistest"
)

// storeRoles is a role table whose roles differ only in what their window
// does when the store cannot answer.
var storeRoles = fstest.MapFS{
	"roles.yaml": {Data: []byte(`defaultRole: open
roles:
  open:
    operations: [CREATE]
    window: {limit: 2, period: 1m, onStoreError: failOpen}
    packages: [p]
  closed:
    operations: [CREATE]
    window: {limit: 2, period: 1m, onStoreError: failClosed}
    packages: [p]
  closedwarn:
    operations: [CREATE]
    enforcement: warn
    window: {limit: 2, period: 1m, onStoreError: failClosed}
    packages: [p]
`)},
	"p.rego": {Data: []byte("package p\n\ndeny contains \"labelled deny\" if input.request.object.metadata.labels.deny == \"yes\"\n")},
}

// TestOnStoreErrorDecidesWhileRedisIsDown runs the engine on a real Redis
// through the Guard qn-webhook uses, kills Redis and restarts it.
func TestOnStoreErrorDecidesWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	c, err := window.NewRedisClient(window.RedisConfig{Address: srv.Addr, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := Load(context.Background(), storeRoles, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	guard := window.NewGuard(window.NewRedisStore(c, window.RedisOptions{}), window.GuardOptions{Name: "redis", Timeout: 100 * time.Millisecond})
	e := NewEngine(set, EngineOptions{Windows: guard})
	seq := 0
	validate := func(role string) Decision {
		seq++
		return e.Validate(context.Background(), node{role: role, user: "alice", uid: fmt.Sprintf("u%d", seq)}.input())
	}

	// Redis answers: both modes count in it, and the report says how.
	for _, role := range []string{"open", "closed"} {
		for i := range 2 {
			d := validate(role)
			if !d.Allowed || d.WindowStore == nil || d.WindowStore.Error != "" || d.WindowStore.Latency <= 0 || d.WindowStore.CountedLocally {
				t.Fatalf("%s change %d with Redis up: %+v store %+v", role, i, d, d.WindowStore)
			}
		}
		if d := validate(role); d.Code != http.StatusTooManyRequests {
			t.Fatalf("%s third change: %d %s, want Redis's 429", role, d.Code, d.Message)
		}
	}
	if d := validate("closed"); d.WindowStore.OnStoreError != window.FailClosed {
		t.Fatalf("report %+v, want the role's onStoreError", d.WindowStore)
	}

	srv.Kill()
	cases := map[string]struct {
		role  string
		check func(t *testing.T, d Decision)
	}{
		"failClosed refuses with 503 and a retry-after": {role: "closed", check: func(t *testing.T, d Decision) {
			if d.Allowed || d.Code != http.StatusServiceUnavailable || d.RetryAfter != time.Second ||
				!strings.Contains(d.Message, `role "closed" admits no change it cannot count (onStoreError: failClosed)`) {
				t.Fatalf("decision %+v", d)
			}
			if d.WindowStore == nil || !strings.Contains(d.WindowStore.Error, "rate window store unavailable") {
				t.Fatalf("report %+v, want the store's error for the decision log", d.WindowStore)
			}
			if strings.Contains(d.Message, srv.Addr) {
				t.Fatalf("the requester is told Redis's address: %s", d.Message)
			}
		}},
		"failClosed under warn enforcement admits with the refusal as a warning": {role: "closedwarn", check: func(t *testing.T, d Decision) {
			if !d.Allowed || len(d.WouldDeny) == 0 || !strings.Contains(strings.Join(d.Warnings, "\n"), "onStoreError: failClosed") {
				t.Fatalf("decision %+v", d)
			}
		}},
		"failOpen admits, warns, and counts on this replica": {role: "open", check: func(t *testing.T, d Decision) {
			if !d.Allowed || d.WindowStore == nil || !d.WindowStore.CountedLocally || d.WindowStore.Error == "" ||
				!strings.Contains(strings.Join(d.Warnings, "\n"), "counted on this replica only") {
				t.Fatalf("decision %+v store %+v", d, d.WindowStore)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, validate(tc.role)) })
	}
	// The local window still holds the limit on its own: one more change
	// fills it, the next is refused with 429.
	if d := validate("open"); !d.Allowed {
		t.Fatalf("second local change: %+v", d)
	}
	if d := validate("open"); d.Code != http.StatusTooManyRequests || !d.WindowStore.CountedLocally {
		t.Fatalf("third local change: %d %s, want the local window's 429", d.Code, d.Message)
	}

	srv.Restart()
	if err := eventually(5*time.Second, func() error {
		if d := validate("closed"); !d.Allowed || d.WindowStore.Error != "" {
			return fmt.Errorf("closed after Redis returned: %d %s %+v", d.Code, d.Message, d.WindowStore)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func eventually(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
