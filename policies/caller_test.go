package policies

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies/window"
)

// TestAChangeWhoseCallerWentAwayTakesNoSlot: a caller that went away
// before its change was counted (its context ended, or the webhook's check
// of the connection says so) gets no judging and no slot, in both forms
// of the validating path, and the store is not asked anything (it would
// answer a canceled call as a store failure: "rate window store
// unavailable").
func TestAChangeWhoseCallerWentAwayTakesNoSlot(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	callers := map[string]context.Context{
		"the request's context ended":          ended,
		"the connection check says it is gone": WithCaller(context.Background(), func() error { return errors.New("the caller reset its connection") }),
	}
	for formName, fsys := range map[string]func() (set *Set, err error){
		"deny rules that do not read the window": func() (*Set, error) {
			return Load(context.Background(), windowedSet("user", ""), LoadOptions{})
		},
		"a deny rule that reads the window": func() (*Set, error) {
			return Load(context.Background(), windowReadingDeny(windowedSet("user", "")), LoadOptions{})
		},
	} {
		set, err := fsys()
		if err != nil {
			t.Fatal(err)
		}
		for name, ctx := range callers {
			t.Run(formName+"/"+name, func(t *testing.T) {
				store := &callCounter{Store: window.NewMemoryStore(nil, window.MemoryOptions{})}
				e := NewEngine(set, EngineOptions{Windows: window.NewGuard(store, window.GuardOptions{Name: "memory", Timeout: 5 * time.Second})})
				d := e.Validate(ctx, node{uid: "gone-1"}.input())
				if !d.CallerGone || d.Allowed || !strings.Contains(d.Message, "took no slot") {
					t.Fatalf("want a change not judged because its caller went away, got %+v", d)
				}
				if dry := e.Validate(ctx, node{uid: "gone-2", dryRun: true}.input()); !dry.CallerGone {
					t.Fatalf("a dry run whose caller went away was judged: %+v", dry)
				}
				if c := store.calls(); c != [3]int{} {
					t.Fatalf("the store was asked %v (takes, peeks, releases); want nothing", c)
				}
			})
		}
	}
}
