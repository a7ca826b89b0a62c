package pattern

import (
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	kjson "sigs.k8s.io/json"
)

// node is a QuantumNode as the webhook decodes it (integers as int64).
const node = `{
  "apiVersion": "qn.dev/v1alpha1", "kind": "QuantumNode",
  "metadata": {"name": "edge-sh-1", "namespace": "edge",
    "labels": {"priority": "low", "app.kubernetes.io/name": "gateway", "topology.kubernetes.io/zone": "cn-shanghai"},
    "annotations": {"qn.dev/latency-budget-ms": "20"}},
  "spec": {
    "replicas": 3,
    "memory": "2Gi",
    "drainTimeout": "45s",
    "weight": 0.5,
    "hardware": {"arch": "arm64"},
    "services": [{"name": "mqtt", "port": 8883}, {"name": "metrics", "port": 9100}]
  }
}`

func decode(t testing.TB, src string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := kjson.UnmarshalCaseSensitivePreserveInts([]byte(src), &m); err != nil {
		t.Fatalf("decode %s: %v", src, err)
	}
	return m
}

// policy builds a pattern policy file around a validate pattern written in
// flow style on one line.
func policy(t testing.TB, pattern string) *Policy {
	t.Helper()
	p, err := Parse("rule.pattern.yaml", []byte("kind: PatternPolicy\nvalidate:\n  message: the node breaks the rule\n  pattern: "+pattern+"\n"))
	if err != nil {
		t.Fatalf("parse %s: %v", pattern, err)
	}
	return p
}

// TestOperatorsAndAnchors runs every Kyverno operator and anchor through
// this package's parse and evaluation, each both ways where it can fail.
func TestOperatorsAndAnchors(t *testing.T) {
	obj := decode(t, node)
	for name, tc := range map[string]struct {
		pattern string
		want    Outcome
		path    string // Kyverno's path for a failure
	}{
		"a plain value matches an equal value":                   {`{metadata: {labels: {priority: low}}}`, Passed, ""},
		"a plain value fails another value and names its path":   {`{metadata: {labels: {priority: high}}}`, Failed, "/metadata/labels/priority/"},
		"a plain value fails a missing field":                    {`{metadata: {labels: {team: ops}}}`, Failed, "/metadata/labels/team/"},
		"a number matches an int64 of the object":                {`{spec: {replicas: 3}}`, Passed, ""},
		"a number fails another number":                          {`{spec: {replicas: 4}}`, Failed, "/spec/replicas/"},
		"a float matches a float":                                {`{spec: {weight: 0.5}}`, Passed, ""},
		"| matches when one alternative does":                    {`{metadata: {labels: {priority: "high|low"}}}`, Passed, ""},
		"| fails when no alternative does":                       {`{metadata: {labels: {priority: "high|medium"}}}`, Failed, "/metadata/labels/priority/"},
		"! matches another value":                                {`{metadata: {labels: {priority: "!high"}}}`, Passed, ""},
		"! fails the value it names":                             {`{metadata: {labels: {priority: "!low"}}}`, Failed, "/metadata/labels/priority/"},
		"> compares numbers":                                     {`{spec: {replicas: ">2"}}`, Passed, ""},
		"> fails an equal number":                                {`{spec: {replicas: ">3"}}`, Failed, "/spec/replicas/"},
		"< compares numbers":                                     {`{spec: {replicas: "<4"}}`, Passed, ""},
		"< fails a larger number":                                {`{spec: {replicas: "<3"}}`, Failed, "/spec/replicas/"},
		">= admits the bound":                                    {`{spec: {replicas: ">=3"}}`, Passed, ""},
		"<= admits the bound":                                    {`{spec: {replicas: "<=3"}}`, Passed, ""},
		"<= compares quantities":                                 {`{spec: {memory: "<=4Gi"}}`, Passed, ""},
		"< fails a larger quantity":                              {`{spec: {memory: "<1Gi"}}`, Failed, "/spec/memory/"},
		">= compares durations":                                  {`{spec: {drainTimeout: ">=30s"}}`, Passed, ""},
		"> fails a shorter duration":                             {`{spec: {drainTimeout: ">1m"}}`, Failed, "/spec/drainTimeout/"},
		"& needs every condition":                                {`{spec: {replicas: ">1 & <5"}}`, Passed, ""},
		"& fails when one condition fails":                       {`{spec: {replicas: ">1 & <3"}}`, Failed, "/spec/replicas/"},
		"a range admits a value inside it":                       {`{spec: {replicas: "1-5"}}`, Passed, ""},
		"a range fails a value outside it":                       {`{spec: {replicas: "4-8"}}`, Failed, "/spec/replicas/"},
		"a range of quantities admits a value inside it":         {`{spec: {memory: "1Gi-4Gi"}}`, Passed, ""},
		"a negated range admits a value outside it":              {`{spec: {replicas: "4!-8"}}`, Passed, ""},
		"a negated range fails a value inside it":                {`{spec: {replicas: "1!-5"}}`, Failed, "/spec/replicas/"},
		"* matches any value":                                    {`{metadata: {labels: {priority: "*"}}}`, Passed, ""},
		"* fails a missing field":                                {`{metadata: {labels: {team: "*"}}}`, Failed, "/metadata/labels/"},
		"* matches a prefix":                                     {`{metadata: {name: "edge-*"}}`, Passed, ""},
		"* fails another prefix":                                 {`{metadata: {name: "core-*"}}`, Failed, "/metadata/name/"},
		"? matches one character":                                {`{spec: {hardware: {arch: "arm6?"}}}`, Passed, ""},
		"? fails two characters":                                 {`{spec: {hardware: {arch: "arm?"}}}`, Failed, "/spec/hardware/arch/"},
		"?* requires a non-empty value":                          {`{metadata: {labels: {priority: "?*"}}}`, Passed, ""},
		"a wildcard label key matches the keys it expands to":    {`{metadata: {labels: {"app.kubernetes.io/*": "gate*"}}}`, Passed, ""},
		"a wildcard label key fails a value under any such key":  {`{metadata: {labels: {"app.kubernetes.io/*": "web"}}}`, Failed, "/metadata/labels/app.kubernetes.io/name/"},
		"null requires the field to be absent":                   {`{spec: {hostNetwork: null}}`, Passed, ""},
		"null fails a field that is set":                         {`{spec: {hardware: {arch: null}}}`, Failed, "/spec/hardware/arch/"},
		"a negation anchor on a label fails a label that is set": {`{metadata: {labels: {"X(priority)": "*"}}}`, Failed, "/metadata/labels/priority/"},
		"a list pattern judges every element":                    {`{spec: {services: [{port: ">8000"}]}}`, Passed, ""},
		"a list pattern fails on the element that breaks it":     {`{spec: {services: [{port: "<9000"}]}}`, Failed, "/spec/services/1/port/"},
		"a pattern mapping fails a scalar in the object":         {`{spec: {replicas: {count: 3}}}`, Failed, "/spec/replicas/"},

		"a conditional anchor whose condition holds checks the rest":   {`{spec: {hardware: {"(arch)": arm64}, replicas: 3}}`, Passed, ""},
		"a conditional anchor whose condition holds fails the rest":    {`{spec: {"(replicas)": 3, hardware: {arch: amd64}}}`, Failed, "/spec/hardware/arch/"},
		"a conditional anchor whose condition fails skips the pattern": {`{spec: {"(replicas)": 4, hardware: {arch: amd64}}}`, Skipped, ""},
		"a conditional anchor on a missing key skips the pattern":      {`{spec: {"(zone)": cn-shanghai, hardware: {arch: amd64}}}`, Skipped, ""},
		"a conditional anchor in a list judges matching elements":      {`{spec: {services: [{"(name)": metrics, port: 9100}]}}`, Passed, ""},
		"a conditional anchor in a list fails a matching element":      {`{spec: {services: [{"(name)": metrics, port: 9101}]}}`, Failed, "/spec/services/1/port/"},
		"an equality anchor admits an absent key":                      {`{metadata: {"=(labels)": {"=(team)": ops}}}`, Passed, ""},
		"an equality anchor checks a present key":                      {`{metadata: {"=(labels)": {"=(priority)": high}}}`, Failed, "/metadata/labels/priority/"},
		"an existence anchor needs one matching element":               {`{spec: {"^(services)": [{name: metrics}]}}`, Passed, ""},
		"an existence anchor fails when no element matches":            {`{spec: {"^(services)": [{name: grpc}]}}`, Failed, "/spec/services/"},
		"a negation anchor admits an absent key":                       {`{spec: {"X(hostNetwork)": null}}`, Passed, ""},
		"a negation anchor fails a present key":                        {`{spec: {hardware: {"X(arch)": null}}}`, Failed, "/spec/hardware/arch/"},
		"a global anchor whose condition holds checks the rest":        {`{spec: {"<(replicas)": 3, hardware: {arch: amd64}}}`, Failed, "/spec/hardware/arch/"},
		"a global anchor whose condition fails skips the pattern":      {`{spec: {"<(replicas)": 4, hardware: {arch: amd64}}}`, Skipped, ""},
		"a global anchor deep in a list skips the whole pattern":       {`{metadata: {labels: {priority: high}}, spec: {services: [{"<(name)": grpc}]}}`, Skipped, ""},
	} {
		t.Run(name, func(t *testing.T) {
			v := policy(t, tc.pattern).Judge(&Request{Operation: "CREATE", Object: obj})
			if v.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s (why %q, failures %+v)", v.Outcome, tc.want, v.Why, v.Failures)
			}
			if tc.want != Failed {
				if v.Message != "" {
					t.Errorf("message %q for a request that did not fail", v.Message)
				}
				return
			}
			if len(v.Failures) != 1 || v.Failures[0].Path != tc.path {
				t.Fatalf("failures %+v, want one at %s", v.Failures, tc.path)
			}
			want := "the node breaks the rule (pattern rule failed at " + tc.path + ": "
			if !strings.HasPrefix(v.Message, want) || !strings.HasSuffix(v.Message, ")") {
				t.Errorf("message %q, want it to start %q", v.Message, want)
			}
		})
	}
}

func TestMessagesSayWhatWasFound(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern, object, want string
	}{
		"a wrong value shows both values": {
			`{metadata: {labels: {priority: low}}}`, `{"metadata": {"labels": {"priority": "high"}}}`,
			"the node breaks the rule (pattern rule failed at /metadata/labels/priority/: resource value 'high' does not match 'low')",
		},
		"a missing label says there is no value": {
			`{metadata: {labels: {priority: low}}}`, `{"metadata": {"labels": {"team": "ops"}}}`,
			"the node breaks the rule (pattern rule failed at /metadata/labels/priority/: no value; the pattern wants 'low')",
		},
		"missing labels say there is no mapping": {
			`{metadata: {labels: {priority: low}}}`, `{"metadata": {"name": "n"}}`,
			"the node breaks the rule (pattern rule failed at /metadata/labels/: no value; the pattern wants a mapping)",
		},
		"a required field names its path once": {
			`{spec: {zone: "*"}}`, `{"spec": {}}`,
			`the node breaks the rule (pattern rule failed at /spec/: /spec/zone is required (pattern "*"))`,
		},
		"a negation names the forbidden field": {
			`{spec: {"X(hostNetwork)": null}}`, `{"spec": {"hostNetwork": true}}`,
			"the node breaks the rule (pattern rule failed at /spec/hostNetwork/: negation anchor matched in resource: /spec/hostNetwork/ is not allowed)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := policy(t, tc.pattern).Judge(&Request{Operation: "CREATE", Object: decode(t, tc.object)})
			if v.Message != tc.want {
				t.Errorf("message\n got %s\nwant %s", v.Message, tc.want)
			}
		})
	}
}

func TestAnyPattern(t *testing.T) {
	p, err := Parse("arch.pattern.yaml", []byte(`kind: PatternPolicy
validate:
  message: nodes run on arm64, or on amd64 with at least 2 replicas
  anyPattern:
  - spec:
      hardware: {arch: arm64}
  - spec:
      hardware: {arch: amd64}
      replicas: ">=2"
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		object string
		want   Outcome
		msg    string
	}{
		"the first alternative admits":  {`{"spec": {"hardware": {"arch": "arm64"}, "replicas": 1}}`, Passed, ""},
		"the second alternative admits": {`{"spec": {"hardware": {"arch": "amd64"}, "replicas": 2}}`, Passed, ""},
		"no alternative fails with each path and line": {`{"spec": {"hardware": {"arch": "amd64"}, "replicas": 1}}`, Failed,
			"nodes run on arm64, or on amd64 with at least 2 replicas (pattern arch: no alternative matched: " +
				"anyPattern[0] failed at /spec/hardware/arch/: resource value 'amd64' does not match 'arm64'; " +
				"anyPattern[1] failed at /spec/replicas/: resource value '1' does not match '>=2')"},
	} {
		t.Run(name, func(t *testing.T) {
			v := p.Judge(&Request{Operation: "CREATE", Object: decode(t, tc.object)})
			if v.Outcome != tc.want || v.Message != tc.msg {
				t.Fatalf("outcome %s message %q, want %s %q", v.Outcome, v.Message, tc.want, tc.msg)
			}
			if tc.want == Failed {
				if got := []int{v.Failures[0].Line, v.Failures[1].Line}; got[0] != 6 || got[1] != 9 {
					t.Errorf("failure lines %v, want [6 9] (arch of the first, replicas of the second)", got)
				}
			}
		})
	}
}

func TestFailureLineTracesThePath(t *testing.T) {
	p, err := Parse("svc.pattern.yaml", []byte(`kind: PatternPolicy
validate:
  message: metrics listens on 9100
  pattern:
    spec:
      services:
      - (name): metrics
        port: 9100
`))
	if err != nil {
		t.Fatal(err)
	}
	v := p.Judge(&Request{Operation: "CREATE", Object: decode(t, `{"spec": {"services": [{"name": "a", "port": 1}, {"name": "metrics", "port": 80}]}}`)})
	if v.Outcome != Failed || v.Failures[0].Path != "/spec/services/1/port/" || v.Failures[0].Line != 8 {
		t.Fatalf("verdict %+v, want a failure at /spec/services/1/port/ on line 8", v)
	}
}

// TestWhenAPolicyApplies covers operations, the old object, the requester
// and Audit: each a path by which a rule could be skipped or misapplied.
func TestWhenAPolicyApplies(t *testing.T) {
	const base = "kind: PatternPolicy\nvalidate:\n  message: batch nodes are low priority\n  pattern: {metadata: {labels: {priority: low}}}\n"
	high := decode(t, `{"metadata": {"labels": {"priority": "high"}}}`)
	low := decode(t, `{"metadata": {"labels": {"priority": "low"}}}`)
	alice := authenticationv1.UserInfo{Username: "alice", Groups: []string{"edge-ops", "system:authenticated"}}
	ci := authenticationv1.UserInfo{Username: "system:serviceaccount:ci:deployer", Groups: []string{"system:serviceaccounts"}}
	for name, tc := range map[string]struct {
		extra string
		req   Request
		want  Outcome
	}{
		"CREATE is judged by default":                   {"", Request{Operation: "CREATE", Object: high}, Failed},
		"UPDATE is judged by default":                   {"", Request{Operation: "UPDATE", Object: high, OldObject: low}, Failed},
		"UPDATE judges the new object, not the old one": {"", Request{Operation: "UPDATE", Object: low, OldObject: high}, Passed},
		"DELETE is not judged by default":               {"", Request{Operation: "DELETE", OldObject: high}, NotApplicable},
		"DELETE judges the object being deleted when listed": {"match: {operations: [DELETE]}\n",
			Request{Operation: "DELETE", OldObject: high}, Failed},
		"an operation not listed is not judged": {"match: {operations: [UPDATE]}\n",
			Request{Operation: "CREATE", Object: high}, NotApplicable},
		"match.userInfo judges the requesters it matches": {"match: {userInfo: {username: \"system:serviceaccount:ci:*\"}}\n",
			Request{Operation: "CREATE", Object: high, UserInfo: ci}, Failed},
		"match.userInfo leaves out other requesters": {"match: {userInfo: {username: \"system:serviceaccount:ci:*\"}}\n",
			Request{Operation: "CREATE", Object: high, UserInfo: alice}, NotApplicable},
		"exclude.userInfo on groups leaves out a requester whose groups all match": {"exclude: {userInfo: {groups: [\"system:serviceaccounts*\"]}}\n",
			Request{Operation: "CREATE", Object: high, UserInfo: ci}, NotApplicable},
		"exclude.userInfo on groups judges a requester with another group": {"exclude: {userInfo: {groups: [\"system:serviceaccounts*\"]}}\n",
			Request{Operation: "CREATE", Object: high, UserInfo: alice}, Failed},
		"match.oldObject judges updates of matching objects": {"match: {oldObject: {metadata: {labels: {priority: low}}}}\n",
			Request{Operation: "UPDATE", Object: high, OldObject: low}, Failed},
		"match.oldObject leaves out a CREATE, which has no old object": {"match: {oldObject: {metadata: {labels: {priority: low}}}}\n",
			Request{Operation: "CREATE", Object: high}, NotApplicable},
		"exclude.operations leaves out the operations it names": {"exclude: {operations: [UPDATE]}\n",
			Request{Operation: "UPDATE", Object: high, OldObject: high}, NotApplicable},
		"CONNECT carries no object and is never judged": {"",
			Request{Operation: "CONNECT"}, NotApplicable},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Parse("batch.pattern.yaml", []byte(base+tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			v := p.Judge(&tc.req)
			if v.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s (why %q)", v.Outcome, tc.want, v.Why)
			}
			deny, warn := Evaluate([]*Policy{p}, &tc.req, nil, nil)
			if (len(deny) == 1) != (tc.want == Failed) || len(warn) != 0 {
				t.Errorf("Evaluate deny %q warn %q for outcome %s", deny, warn, tc.want)
			}
		})
	}
}

func TestAuditWarnsInsteadOfDenying(t *testing.T) {
	p, err := Parse("batch.pattern.yaml", []byte("kind: PatternPolicy\nvalidate:\n  message: batch nodes are low priority\n  failureAction: Audit\n  pattern: {metadata: {labels: {priority: low}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	deny, warn := Evaluate([]*Policy{p}, &Request{Operation: "CREATE", Object: decode(t, `{"metadata": {"labels": {"priority": "high"}}}`)}, nil, nil)
	if len(deny) != 0 || len(warn) != 1 || !strings.HasPrefix(warn[0], "batch nodes are low priority (pattern batch failed at /metadata/labels/priority/") {
		t.Fatalf("deny %q warn %q, want one warning naming the path", deny, warn)
	}
}

// TestWildcardKeysDoNotLeakBetweenRequests: Kyverno's matcher rewrites a
// wildcard label key in the pattern it is given into the key it matched.
// Shared patterns must come out of every request unchanged, also under
// concurrent requests (go test -race).
func TestWildcardKeysDoNotLeakBetweenRequests(t *testing.T) {
	p := policy(t, `{metadata: {labels: {"team.qn.dev/*": "?*"}}}`)
	first := decode(t, `{"metadata": {"labels": {"team.qn.dev/owner": "ops"}}}`)
	second := decode(t, `{"metadata": {"labels": {"team.qn.dev/lead": ""}}}`)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if v := p.Judge(&Request{Operation: "CREATE", Object: first}); v.Outcome != Passed {
					t.Errorf("first: %s %s", v.Outcome, v.Message)
					return
				}
				if v := p.Judge(&Request{Operation: "CREATE", Object: second}); v.Outcome != Failed || v.Failures[0].Path != "/metadata/labels/team.qn.dev/lead/" {
					t.Errorf("second: %s %+v", v.Outcome, v.Failures)
					return
				}
			}
		}()
	}
	wg.Wait()
	labels := p.Patterns[0].Value().(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
	if _, ok := labels["team.qn.dev/*"]; !ok || len(labels) != 1 {
		t.Errorf("the shared pattern changed: %v", labels)
	}
}
