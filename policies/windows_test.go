package policies

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
	"github.com/quantumnode/qn-admission/test/harness"
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
	validateLabelled := func(role string, labels map[string]string) Decision {
		seq++
		return e.Validate(context.Background(), node{role: role, user: "alice", uid: fmt.Sprintf("u%d", seq), labels: labels}.input())
	}
	validate := func(role string) Decision { return validateLabelled(role, nil) }

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
		role   string
		labels map[string]string
		check  func(t *testing.T, d Decision)
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
		"failClosed: a change the policies refuse gets its own 403, the store not asked": {role: "closed", labels: map[string]string{"deny": "yes"}, check: func(t *testing.T, d Decision) {
			if d.Allowed || d.Code != http.StatusForbidden || !slices.Equal(d.Reasons, []string{"labelled deny"}) || d.WindowStore != nil {
				t.Fatalf("decision %+v store %+v, want the policies' refusal without a store call", d, d.WindowStore)
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
		t.Run(name, func(t *testing.T) { tc.check(t, validateLabelled(tc.role, tc.labels)) })
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
	if err := harness.Eventually(context.Background(), 5*time.Second, func() error {
		if d := validate("closed"); !d.Allowed || d.WindowStore.Error != "" {
			return fmt.Errorf("closed after Redis returned: %d %s %+v", d.Code, d.Message, d.WindowStore)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// callCounter counts the calls the engine makes to a window store, and can
// make Release fail.
type callCounter struct {
	window.Store
	mu                    sync.Mutex
	takes, peeks, release int
	failRelease           error
}

func (c *callCounter) Take(ctx context.Context, key string, l window.Limit, uid string) (window.Taken, error) {
	c.mu.Lock()
	c.takes++
	c.mu.Unlock()
	return c.Store.Take(ctx, key, l, uid)
}

func (c *callCounter) Peek(ctx context.Context, key string, l window.Limit) (window.State, error) {
	c.mu.Lock()
	c.peeks++
	c.mu.Unlock()
	return c.Store.Peek(ctx, key, l)
}

func (c *callCounter) Release(ctx context.Context, key string, r window.Receipt) error {
	c.mu.Lock()
	c.release++
	err := c.failRelease
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.Store.Release(ctx, key, r)
}

func (c *callCounter) calls() [3]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [3]int{c.takes, c.peeks, c.release}
}

// windowStores are the stores the engine's window path is tested with:
// the in-process one and a real redis-server, each behind the Guard
// qn-webhook puts around it.
func windowStores(t *testing.T) map[string]func(t *testing.T) window.Store {
	return map[string]func(t *testing.T) window.Store{
		"memory": func(*testing.T) window.Store { return window.NewMemoryStore(nil, window.MemoryOptions{}) },
		"redis": func(t *testing.T) window.Store {
			srv := redistest.Start(t)
			c, err := window.NewRedisClient(window.RedisConfig{Address: srv.Addr, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return window.NewRedisStore(c, window.RedisOptions{})
		},
	}
}

// TestOneWindowCallPerAdmittedRequest: a request with a window costs the
// store one call: the slot is taken before the policies run, and that
// call answers the window they read. A dry run only reads. When no deny
// rule reads the window, a change they refuse costs the store no call at
// all, and one they cannot judge one read (the deny rules are judged
// first, DenyFirst); when one does, such a change takes its slot and gives
// it back (a second call only then). Either way a refused change gets no
// warning from the rules that read the window: it is not counted.
func TestOneWindowCallPerAdmittedRequest(t *testing.T) {
	fail := &fstest.MapFile{Data: []byte("package p\n\ndeny contains x if {\n\tinput.context.labels.fail == \"yes\"\n\tx := 1 / 0\n}\n")}
	denyFirst := windowedSet("user", "")
	denyFirst["fail.rego"] = fail
	takeFirst := windowReadingDeny(windowedSet("user", ""))
	takeFirst["fail.rego"] = fail
	forms := map[string]struct {
		fsys            fstest.MapFS
		refused, failed [3]int
	}{
		"deny rules that do not read the window": {fsys: denyFirst, refused: [3]int{0, 0, 0}, failed: [3]int{0, 1, 0}},
		"a deny rule that reads the window":      {fsys: takeFirst, refused: [3]int{1, 0, 1}, failed: [3]int{1, 0, 1}},
	}
	for formName, form := range forms {
		set, err := Load(context.Background(), form.fsys, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct {
			n        node
			allowed  bool
			calls    [3]int // takes, peeks, releases
			count    int    // the window's count afterwards
			warnings []string
		}{
			"an admitted change: one take":       {n: node{}, allowed: true, calls: [3]int{1, 0, 0}, count: 1, warnings: []string{"window 0/2"}},
			"a change the policies refuse":       {n: node{labels: map[string]string{"deny": "yes"}}, calls: form.refused, warnings: []string{}},
			"a change the policies cannot judge": {n: node{labels: map[string]string{"fail": "yes"}}, calls: form.failed},
			"a dry run: one read":                {n: node{dryRun: true}, allowed: true, calls: [3]int{0, 1, 0}, warnings: []string{"window 0/2"}},
		}
		for storeName, newStore := range windowStores(t) {
			t.Run(formName+"/"+storeName, func(t *testing.T) {
				for name, tc := range cases {
					t.Run(name, func(t *testing.T) {
						store := &callCounter{Store: newStore(t)}
						e := NewEngine(set, EngineOptions{Windows: window.NewGuard(store, window.GuardOptions{Name: storeName, Timeout: 5 * time.Second})})
						n := tc.n
						n.uid = "req-1"
						d := e.Validate(context.Background(), n.input())
						if d.Allowed != tc.allowed || store.calls() != tc.calls {
							t.Fatalf("allowed=%v (%s) after %v store calls (takes, peeks, releases); want allowed=%v after %v", d.Allowed, d.Message, store.calls(), tc.allowed, tc.calls)
						}
						if tc.warnings != nil && !slices.Equal(d.Warnings, tc.warnings) {
							t.Fatalf("warnings %q, want %q: the policies see the window before this change", d.Warnings, tc.warnings)
						}
						if st, _ := store.Peek(context.Background(), windowKey("r", &Window{Key: KeyUser}, Facts{User: "alice"}), window.Limit{Count: 2, Period: 10 * time.Second}); st.Count != tc.count {
							t.Fatalf("the window counts %d afterwards, want %d", st.Count, tc.count)
						}
					})
				}
			})
		}
	}
}

// windowReadingDeny adds a deny rule that reads input.context.window to a
// windowedSet (one that never fires at its limit of 2), so the set is
// judged with the window taken first, not DenyFirst.
func windowReadingDeny(fsys fstest.MapFS) fstest.MapFS {
	fsys["window-deny.rego"] = &fstest.MapFile{Data: []byte("package p\n\ndeny contains \"over\" if input.context.window.count > 1000\n")}
	return fsys
}

// TestARefusedChangeWhoseSlotCannotBeGivenBack: when the store cannot take
// the slot of a refused change back, the refusal stands, the decision log
// says what happened, and the change counts until it leaves the window:
// the requester has one slot less for one period, the limit holds.
func TestARefusedChangeWhoseSlotCannotBeGivenBack(t *testing.T) {
	// A deny rule reads the window, so a refused change took its slot.
	set, err := Load(context.Background(), windowReadingDeny(windowedSet("user", "")), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &callCounter{Store: window.NewMemoryStore(nil, window.MemoryOptions{}), failRelease: fmt.Errorf("connection reset by peer")}
	const deadline = 10 * time.Millisecond
	e := NewEngine(set, EngineOptions{Windows: window.NewGuard(store, window.GuardOptions{Name: "flaky", Timeout: deadline})})
	d := e.Validate(context.Background(), node{uid: "refused", labels: map[string]string{"deny": "yes"}}.input())
	if d.Allowed || d.Code != http.StatusForbidden {
		t.Fatalf("decision %d %s, want the policies' 403", d.Code, d.Message)
	}
	if d.WindowStore == nil || !strings.Contains(d.WindowStore.Error, "could not be given back") || !strings.Contains(d.WindowStore.Error, "connection reset by peer") {
		t.Fatalf("store report %+v, want the failed release for the decision log", d.WindowStore)
	}
	// The failure took the store down; the Guard asks it again once its
	// deadline has passed.
	store.failRelease = nil
	time.Sleep(2 * deadline)
	if d := e.Validate(context.Background(), node{uid: "second"}.input()); !d.Allowed || !slices.Equal(d.Warnings, []string{"window 1/2"}) {
		t.Fatalf("the next change: %v %q; want admitted, the refused change still counted (window 1/2)", d.Allowed, d.Warnings)
	}
	if d := e.Validate(context.Background(), node{uid: "third"}.input()); d.Code != http.StatusTooManyRequests {
		t.Fatalf("the third change: %d %s; want 429, the limit of 2 holding", d.Code, d.Message)
	}
}

// TestConcurrentRequestsNeverExceedTheWindow sends one user's changes
// from many goroutines through the engine, every other one refused by its
// policies, against each store, with deny rules judged first (DenyFirst:
// a refused change takes no slot) and with a deny rule that reads the
// window (slots taken by refused changes are held while their policies
// run and then given back): no more than the limit are admitted, and the
// window afterwards counts exactly the admitted.
func TestConcurrentRequestsNeverExceedTheWindow(t *testing.T) {
	const limit = 20
	roles := &fstest.MapFile{Data: []byte(fmt.Sprintf("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: %d, period: 1h}\n    packages: [p]\n", limit))}
	denyFirst, takeFirst := windowedSet("user", ""), windowReadingDeny(windowedSet("user", ""))
	denyFirst["roles.yaml"], takeFirst["roles.yaml"] = roles, roles
	for formName, fsys := range map[string]fstest.MapFS{"deny first": denyFirst, "take first": takeFirst} {
		set, err := Load(context.Background(), fsys, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := set.denyFirst["r"] != nil; got != (formName == "deny first") {
			t.Fatalf("%s: DenyFirst prepared: %v", formName, got)
		}
		for name, newStore := range windowStores(t) {
			t.Run(formName+"/"+name, func(t *testing.T) {
				// The wrapper makes the memory store's calls count as round
				// trips too (window.Remote), so both stores run deny first.
				concurrentChanges(t, set, &callCounter{Store: newStore(t)}, name, limit)
			})
		}
	}
}

func concurrentChanges(t *testing.T, set *Set, store window.Store, name string, limit int) {
	e := NewEngine(set, EngineOptions{Windows: window.NewGuard(store, window.GuardOptions{Name: name, Timeout: 5 * time.Second})})
	var mu sync.Mutex
	admitted, refusedByPolicy, tooMany := 0, 0, 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 12 {
				n := node{uid: fmt.Sprintf("g%d-%d", g, i)}
				if i%2 == 1 {
					n.labels = map[string]string{"deny": "yes"}
				}
				d := e.Validate(context.Background(), n.input())
				mu.Lock()
				switch {
				case d.Allowed:
					admitted++
				case d.Code == http.StatusForbidden:
					refusedByPolicy++
				case d.Code == http.StatusTooManyRequests:
					tooMany++
				default:
					t.Errorf("unexpected decision %d %s", d.Code, d.Message)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st, err := store.Peek(context.Background(), windowKey("r", &Window{Key: KeyUser}, Facts{User: "alice"}), window.Limit{Count: limit, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d admitted, %d refused by policy, %d refused with 429; the window counts %d", admitted, refusedByPolicy, tooMany, st.Count)
	if admitted > limit || st.Count != admitted || refusedByPolicy+tooMany+admitted != 96 {
		t.Fatalf("%d admitted and the window counts %d; want them equal and at most %d", admitted, st.Count, limit)
	}
	// Refused changes held their slots only while judged: the
	// window fills to exactly its limit.
	for i := 0; st.Count < limit; i++ {
		if d := e.Validate(context.Background(), node{uid: fmt.Sprintf("after-%d", i)}.input()); !d.Allowed {
			t.Fatalf("with %d of %d counted, a change was refused: %s", st.Count, limit, d.Message)
		}
		st.Count++
	}
	if d := e.Validate(context.Background(), node{uid: "one-too-many"}.input()); d.Code != http.StatusTooManyRequests {
		t.Fatalf("the window admitted more than its limit: %d %s", d.Code, d.Message)
	}
}

// TestWithoutWindowWarningsKeepsWhatOthersSaid: on a refusal only what the
// window-reading packages alone said goes; a message another package or a
// pattern policy also gave stays, in its place.
func TestWithoutWindowWarningsKeepsWhatOthersSaid(t *testing.T) {
	res := rego.Result{
		Deny:   []string{"no"},
		DenyBy: []rego.Entry{{Source: "p", Message: "no"}},
		Warn:   []string{"shared", "window 3/4", "other", "from a pattern"},
		WarnBy: []rego.Entry{
			{Source: "w", Message: "shared"}, {Source: "w", Message: "window 3/4"},
			{Source: "p", Message: "other"}, {Source: "p", Message: "shared"},
			{Source: "w", Message: "from a pattern", Pattern: true},
		},
	}
	got := withoutWindowWarnings(res, map[string]bool{"w": true})
	if want := []string{"shared", "other", "from a pattern"}; !slices.Equal(got.Warn, want) {
		t.Fatalf("warnings %q, want %q", got.Warn, want)
	}
	if len(got.WarnBy) != 3 || slices.ContainsFunc(got.WarnBy, func(en rego.Entry) bool { return en.Source == "w" && !en.Pattern }) {
		t.Fatalf("attributions %+v, want those of p and the pattern", got.WarnBy)
	}
	if len(res.Warn) != 4 || len(res.WarnBy) != 5 {
		t.Fatalf("the caller's result changed: %+v", res)
	}
	if same := withoutWindowWarnings(res, map[string]bool{"x": true}); !slices.Equal(same.Warn, res.Warn) {
		t.Fatalf("no reader's warning, yet %q became %q", res.Warn, same.Warn)
	}
}
