package policies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"sort"
	"testing"
	"testing/fstest"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/rego"
)

// TestDenyFirstAnswersAsOneStage holds the two-stage validation of the
// windowed roles (DenyFirst: deny rules, then the window, then warn rules)
// to the one-stage query that takes the slot first, with the bundled
// policies and role table (smaller window limits): every load fixture,
// every bundled fixture case and 100 generated QuantumNodes, sent twice in
// a row to both, each engine with a window store of its own on a stopped
// clock, so windows fill, warn near their limit (the bundled qn.window
// rule reads input.context.window) and refuse with 429. Every decision,
// warnings, denials, findings and window included, must be the same but
// for the store report of a refused change: the deny-first engine makes no
// store call for a change its policies refuse, where the one stage takes a
// slot and gives it back.
func TestDenyFirstAnswersAsOneStage(t *testing.T) {
	// The bundled policies with smaller windows, which these inputs fill.
	fsys := fstest.MapFS{}
	err := fs.WalkDir(rego.Bundled(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(rego.Bundled(), path)
		if path == RolesFile {
			data = bytes.ReplaceAll(data, []byte("window: {limit: 120,"), []byte("window: {limit: 12,"))
			data = bytes.ReplaceAll(data, []byte("window: {limit: 30,"), []byte("window: {limit: 5,"))
			data = bytes.ReplaceAll(data, []byte("window: {limit: 600,"), []byte("window: {limit: 40,"))
		}
		fsys[path] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	set, err := Load(context.Background(), fsys, LoadOptions{SkipTests: true})
	if err != nil {
		t.Fatal(err)
	}
	var windowed []string
	for name, r := range set.Roles.Roles {
		if r.Window != nil && len(r.Packages) > 0 {
			windowed = append(windowed, name)
			if set.denyFirst[name] == nil {
				t.Fatalf("role %s: its deny rules do not read the window, yet it has no DenyFirst", name)
			}
		}
	}
	if len(windowed) == 0 {
		t.Fatal("no bundled role has a window")
	}
	oneStage := *set
	oneStage.denyFirst = nil

	inputs := decisionInputs(t)
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names)

	newEngine := func(s *Set) (*Engine, *callCounter) {
		store := &callCounter{Store: window.NewMemoryStore(clocktesting.NewFakePassiveClock(t0), window.MemoryOptions{})}
		return NewEngine(s, EngineOptions{Windows: window.NewGuard(store, window.GuardOptions{Name: "memory"})}), store
	}
	twoStage, twoStore := newEngine(set)
	single, oneStore := newEngine(&oneStage)
	refused, tooMany, warned := 0, 0, 0
	for round := range 2 {
		for _, name := range names {
			in := inputs[name]
			in.Facts.UID = fmt.Sprintf("%s #%d", name, round)
			got, want := twoStage.Validate(context.Background(), in), single.Validate(context.Background(), in)
			for _, d := range []*Decision{&got, &want} {
				if d.WindowStore != nil {
					d.WindowStore.Latency = 0
				}
			}
			if !want.Allowed && want.Code == 403 && got.WindowStore == nil {
				// Deny first never asked the store about this change.
				want.WindowStore = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (round %d): deny first\n%+v\none stage\n%+v", name, round, got, want)
			}
			switch {
			case got.Code == 429:
				tooMany++
			case !got.Allowed:
				refused++
			}
			for _, w := range got.Warnings {
				if len(w) > 12 && w[:12] == "rate window:" {
					warned++
				}
			}
		}
	}
	t.Logf("%d decisions over roles %v: %d refused by the policies, %d with 429, %d warned near the limit", 2*len(names), windowed, refused, tooMany, warned)
	if refused == 0 || tooMany == 0 || warned == 0 {
		t.Fatalf("the inputs did not reach every path: %d refused, %d with 429, %d warned near the limit", refused, tooMany, warned)
	}
	// Each change the policies refuse: a take in one stage, given back
	// unless the window was full; no call at all deny first.
	two, one := twoStore.calls(), oneStore.calls()
	if one[2] == 0 || two[1] != 0 || two[2] != 0 || two[0] >= one[0] || two[0]+refused < one[0] {
		t.Fatalf("store calls (takes, peeks, releases): deny first %v, one stage %v; want no call for a change the policies refuse", two, one)
	}
	t.Logf("store calls (takes, peeks, releases): deny first %v, one stage %v", two, one)
}

// TestDenyFirstOnlyWhereDenyIgnoresTheWindow: a role is judged deny first
// only when none of its packages' deny rules may read
// input.context.window, directly, through a rule or function they use, or
// through a read the analysis cannot follow; its warn rules that may read
// it make the second stage.
func TestDenyFirstOnlyWhereDenyIgnoresTheWindow(t *testing.T) {
	cases := map[string]struct {
		rego string
		want bool
		// second: a warn rule reads the window, so a second stage runs.
		second bool
	}{
		"deny reads the request only":   {rego: "deny contains \"no\" if input.context.labels.deny == \"yes\"", want: true},
		"deny reads the window":         {rego: "deny contains \"full\" if input.context.window.remaining == 0"},
		"through a helper rule":         {rego: "used := input.context.window.count\n\ndeny contains \"busy\" if used > 1"},
		"through a function":            {rego: "busy(w) if w.count > 1\n\ndeny contains \"busy\" if busy(input.context.window)"},
		"the whole context":             {rego: "deny contains \"busy\" if object.get(input.context, \"window\", {}).count > 1"},
		"a key the analysis cannot see": {rego: "deny contains k if { some k; input.context[k].count > 1 }"},
		"only a warn rule reads it":     {rego: "warn contains \"near\" if input.context.window.remaining < 2\n\ndeny contains \"no\" if input.context.labels.deny == \"yes\"", want: true, second: true},
		"a warn rule reads the request": {rego: "warn contains \"labelled\" if input.context.labels.deny == \"yes\"", want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"roles.yaml": {Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: 2, period: 10s}\n    packages: [p, q]\n  nowindow:\n    operations: [CREATE]\n    packages: [p, q]\n")},
				"p.rego":     {Data: []byte("package p\n\n" + tc.rego + "\n")},
				"q.rego":     {Data: []byte("package q\n\ndeny contains \"never\" if input.context.labels.q == \"yes\"\n")},
			}
			set, err := Load(context.Background(), fsys, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := set.denyFirst["r"] != nil; got != tc.want {
				t.Fatalf("DenyFirst prepared: %v, want %v", got, tc.want)
			}
			if tc.want && (set.denyFirst["r"].Second != nil) != tc.second {
				t.Fatalf("a second stage: %v, want %v", set.denyFirst["r"].Second != nil, tc.second)
			}
			if set.denyFirst["nowindow"] != nil {
				t.Fatal("a role without a window has a DenyFirst")
			}
		})
	}
}

// TestDenyFirstOnlyWhereCallsAreRoundTrips: the engine judges deny first
// only when a window call may leave the process (window.Remote): a Guard
// of any store but the in-process MemoryStore, or a shadow's View of one.
// In-process windows keep the one-stage order, where giving a slot back
// costs less than the second evaluation.
func TestDenyFirstOnlyWhereCallsAreRoundTrips(t *testing.T) {
	set, err := Load(context.Background(), windowedSet("user", ""), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	memory := window.NewMemoryStore(nil, window.MemoryOptions{})
	remote := window.NewGuard(&callCounter{Store: memory}, window.GuardOptions{Name: "remote"})
	cases := map[string]struct {
		counter window.Counter
		want    bool
	}{
		"the engine's default":             {counter: nil},
		"a Guard of the memory store":      {counter: window.NewGuard(memory, window.GuardOptions{Name: "memory"})},
		"the memory store itself":          {counter: memory},
		"a Guard of another store":         {counter: remote, want: true},
		"a View of a Guard of that store":  {counter: window.NewView(remote, ""), want: true},
		"a View of the memory store's one": {counter: window.NewView(window.NewGuard(memory, window.GuardOptions{}), "")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if e := NewEngine(set, EngineOptions{Windows: tc.counter}); e.denyFirst != tc.want {
				t.Fatalf("deny first: %v, want %v", e.denyFirst, tc.want)
			}
		})
	}
}

// TestDenyFirstFailsAsOneStage: a change whose deny rules cannot be judged
// gets the one-stage answer from one read of the window and no second
// evaluation, with the store up and with a store that cannot answer,
// under either onStoreError.
func TestDenyFirstFailsAsOneStage(t *testing.T) {
	for _, onErr := range []string{"failOpen", "failClosed"} {
		fsys := windowedSet("user", "")
		fsys["roles.yaml"] = &fstest.MapFile{Data: []byte("defaultRole: r\nroles:\n  r:\n    operations: [CREATE]\n    window: {limit: 2, period: 10s, key: user, onStoreError: " + onErr + "}\n    packages: [p]\n")}
		fsys["fail.rego"] = &fstest.MapFile{Data: []byte("package p\n\ndeny contains x if {\n\tinput.context.labels.fail == \"yes\"\n\tx := 1 / 0\n}\n")}
		set, err := Load(context.Background(), fsys, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oneStage := *set
		oneStage.denyFirst = nil
		for _, down := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, store down: %v", onErr, down), func(t *testing.T) {
				decide := func(s *Set) (Decision, [3]int) {
					store := &callCounter{Store: window.NewMemoryStore(nil, window.MemoryOptions{})}
					var counted window.Store = store
					if down {
						counted = unreachable{store}
					}
					e := NewEngine(s, EngineOptions{Windows: window.NewGuard(counted, window.GuardOptions{Name: "store", Timeout: time.Second})})
					d := e.Validate(context.Background(), node{uid: "u", labels: map[string]string{"fail": "yes"}}.input())
					if d.WindowStore != nil {
						d.WindowStore.Latency = 0
					}
					return d, store.calls()
				}
				got, calls := decide(set)
				want, _ := decide(&oneStage)
				if got.Allowed || !reflect.DeepEqual(got, want) {
					t.Fatalf("deny first\n%+v\none stage\n%+v", got, want)
				}
				if wantCalls := [3]int{0, 1, 0}; !down && calls != wantCalls {
					t.Fatalf("store calls (takes, peeks, releases) %v, want %v", calls, wantCalls)
				}
			})
		}
	}
}

// unreachable is a store that never answers.
type unreachable struct{ window.Store }

func (unreachable) Take(context.Context, string, window.Limit, string) (window.Taken, error) {
	return window.Taken{}, errors.New("connection refused")
}

func (unreachable) Peek(context.Context, string, window.Limit) (window.State, error) {
	return window.State{}, errors.New("connection refused")
}

func (unreachable) Release(context.Context, string, window.Receipt) error {
	return errors.New("connection refused")
}
