package app

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// producers are the rules that put entries into a decision: deny, warn and
// patch, and the violation rules a guarded deny reads its messages from.
var producers = map[string]bool{"deny": true, "warn": true, "patch": true, "violation": true}

// Every deny, warn, patch and violation rule of the bundled policies
// produces an entry in at least one bundled fixture case, and every role of
// the table judges at least one case: the fixtures cover every rule and
// every row.
func TestBundledFixturesCoverEveryRuleAndRole(t *testing.T) {
	ctx := context.Background()
	set, err := policies.Load(ctx, rego.Bundled(), policies.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := bundledCases(t, time.Now())
	fired := map[string]bool{}
	roles := map[string]bool{}
	for _, c := range cases {
		review, err := c.Spec.reviewBytes()
		if err != nil {
			t.Fatal(err)
		}
		out, err := evaluate(ctx, set, evalRequest{Review: review, Webhook: c.Webhook, Now: c.Now, WindowCount: c.Windows, Explain: true})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, a := range []*webhookAnswer{out.Mutate, out.Validate} {
			if a == nil || a.Explanation == nil {
				continue
			}
			if a.Explanation.Evaluated {
				roles[a.Explanation.Role] = true
			}
			for _, f := range a.Explanation.Firings {
				if f.Entry {
					fired[f.Location()] = true
				}
			}
		}
	}
	// A package no role lists (bundled off, as qn.nodeclaim until the
	// inventory is on) never judges a request: its own Rego tests cover it.
	listed := map[string]bool{}
	for _, r := range set.Roles.Roles {
		for _, pkg := range r.Packages {
			listed[pkg] = true
		}
	}
	var missing []string
	for path, mod := range set.Compiled.Modules() {
		if strings.HasSuffix(path, "_test.rego") || !listed[strings.TrimPrefix(mod.Package.Path.String(), "data.")] {
			continue
		}
		for _, r := range mod.Rules {
			if name := r.Head.Ref().String(); producers[name] && !fired[r.Location.File+":"+strconv.Itoa(r.Location.Row)] {
				missing = append(missing, name+" at "+r.Location.File+":"+strconv.Itoa(r.Location.Row))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no bundled fixture case makes these rules produce an entry:\n  %s", strings.Join(missing, "\n  "))
	}
	for _, name := range set.Roles.Names() {
		if !roles[name] {
			t.Errorf("no bundled fixture case is judged by role %q", name)
		}
	}
}
