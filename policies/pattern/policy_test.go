package pattern

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/quantumnode/qn-admission/internal/problem"
)

// TestLoadErrorsNameFileAndLine: every mistake in a pattern policy file is
// reported as file:line: field: problem, before the set is served.
func TestLoadErrorsNameFileAndLine(t *testing.T) {
	const head = "kind: PatternPolicy\nvalidate:\n  message: nodes need a priority\n"
	for name, tc := range map[string]struct {
		src  string
		want string // the whole error, or its start when it ends in "…"
	}{
		"an add-if-not-present anchor, which only mutates": {head + "  pattern:\n    metadata:\n      labels:\n        +(priority): low\n",
			"p.pattern.yaml:7: validate.pattern.metadata.labels.+(priority): +() (add if not present) is a mutate anchor; a validate pattern takes (), =(), ^(), X() or <()"},
		"an anchor with a missing parenthesis": {head + "  pattern:\n    spec:\n      (arch: arm64\n",
			`p.pattern.yaml:6: validate.pattern.spec.(arch: "(arch" is not an anchor: write (key), =(key), ^(key), X(key) or <(key), with nothing outside the parentheses`},
		"an anchor with an unknown modifier": {head + "  pattern:\n    spec:\n      Y(arch): arm64\n",
			`p.pattern.yaml:6: validate.pattern.spec.Y(arch): "Y(arch)" is not an anchor…`},
		"anchors nested inside one key": {head + "  pattern:\n    spec:\n      =(X(arch)): arm64\n",
			`p.pattern.yaml:6: validate.pattern.spec.=(X(arch)): "=(X(arch))" nests anchors in one key…`},
		"an existence anchor over a scalar": {head + "  pattern:\n    spec:\n      ^(services): mqtt\n",
			"p.pattern.yaml:6: validate.pattern.spec.^(services): an existence anchor ^() holds a list of patterns…"},
		"an existence anchor over a list of scalars": {head + "  pattern:\n    spec:\n      ^(services): [mqtt]\n",
			"p.pattern.yaml:6: validate.pattern.spec.^(services): each pattern under an existence anchor ^() must be a mapping…"},
		"an unknown top-level field": {"kind: PatternPolicy\nmatchh: {}\nvalidate: {message: m, pattern: {a: b}}\n",
			"p.pattern.yaml:2: matchh: unknown field (known here: kind, description, match, exclude, validate)"},
		"an unknown field in validate": {head + "  patern:\n    a: b\n",
			"p.pattern.yaml:4: validate.patern: unknown field (known here: message, failureAction, pattern, anyPattern)"},
		"an unknown field in match": {head + "  pattern: {a: b}\nmatch:\n  subjects: [alice]\n",
			"p.pattern.yaml:6: match.subjects: unknown field (known here: operations, userInfo, oldObject)"},
		"a userInfo field that does not exist": {head + "  pattern: {a: b}\nmatch:\n  userInfo:\n    user: alice\n",
			`p.pattern.yaml:7: match.userInfo.user: request.userInfo has no field "user" (it has username, uid, groups, extra)`},
		"an operation a pattern cannot judge": {head + "  pattern: {a: b}\nmatch:\n  operations: [CREATE, CONNECT]\n",
			`p.pattern.yaml:6: match.operations: "CONNECT" is not an operation a pattern can judge (use CREATE, UPDATE, DELETE)`},
		"no kind": {"validate: {message: m, pattern: {a: b}}\n",
			"p.pattern.yaml:1: kind: missing; declare kind: PatternPolicy"},
		"another kind": {"kind: ClusterPolicy\nvalidate: {message: m, pattern: {a: b}}\n",
			`p.pattern.yaml:1: kind: "ClusterPolicy" is not PatternPolicy`},
		"no validate": {"kind: PatternPolicy\n",
			"p.pattern.yaml:1: validate: missing; declare validate with a message and a pattern or anyPattern"},
		"no message": {"kind: PatternPolicy\nvalidate:\n  pattern: {a: b}\n",
			"p.pattern.yaml:3: validate.message: write the sentence a person reads when the pattern fails"},
		"a message with a JMESPath variable": {"kind: PatternPolicy\nvalidate:\n  message: '{{ request.object.metadata.name }} is bad'\n  pattern: {a: b}\n",
			"p.pattern.yaml:3: validate.message: JMESPath variables ({{ ... }}) are not supported; write a plain sentence"},
		"neither pattern nor anyPattern": {head,
			"p.pattern.yaml:3: validate: declare pattern (one pattern the object must match) or anyPattern (a list, any one suffices)"},
		"both pattern and anyPattern": {head + "  pattern: {a: b}\n  anyPattern: [{a: c}]\n",
			"p.pattern.yaml:5: validate.anyPattern: declare pattern or anyPattern, not both"},
		"an empty anyPattern": {head + "  anyPattern: []\n",
			"p.pattern.yaml:4: validate.anyPattern: must be a list of one or more patterns"},
		"a pattern that is not a mapping": {head + "  pattern: low\n",
			"p.pattern.yaml:4: validate.pattern: a pattern is a mapping that mirrors the document it matches…"},
		"a bad failure action": {head + "  failureAction: Warn\n  pattern: {a: b}\n",
			`p.pattern.yaml:4: validate.failureAction: "Warn" is not a failure action (use Enforce to deny or Audit to warn)`},
		"a JMESPath variable in a value": {head + "  pattern:\n    metadata:\n      name: '{{ request.userInfo.username }}'\n",
			`p.pattern.yaml:6: validate.pattern.metadata.name: "{{ request.userInfo.username }}" uses a JMESPath variable…`},
		"a $() reference": {head + "  pattern:\n    spec:\n      limit: '<=$(../request)'\n",
			`p.pattern.yaml:6: validate.pattern.spec.limit: "<=$(../request)" uses a $(...) reference…`},
		"a comparison with a word": {head + "  pattern:\n    spec:\n      replicas: '>many'\n",
			`p.pattern.yaml:6: validate.pattern.spec.replicas: ">many": > needs a number, a quantity (500m, 2Gi) or a duration (30s) to compare with, not "many"`},
		"a comparison with nothing after |": {head + "  pattern:\n    spec:\n      replicas: '1 | <='\n",
			`p.pattern.yaml:6: validate.pattern.spec.replicas: "1 | <=": <= needs a number…`},
		"an empty list": {head + "  pattern:\n    spec:\n      services: []\n",
			"p.pattern.yaml:6: validate.pattern.spec.services: an empty list matches nothing in Kyverno…"},
		"a label pattern that is not a string": {head + "  pattern:\n    metadata:\n      labels:\n        X(priority): null\n",
			"p.pattern.yaml:7: validate.pattern.metadata.labels.X(priority): a label or annotation pattern must be a string…"},
		"a number as an annotation pattern": {head + "  pattern:\n    metadata:\n      =(annotations):\n        qn.dev/latency-budget-ms: 20\n",
			"p.pattern.yaml:7: validate.pattern.metadata.=(annotations).qn.dev/latency-budget-ms: a label or annotation pattern must be a string…"},
		"an unquoted wildcard read as a YAML alias": {head + "  pattern:\n    metadata:\n      name: *\n",
			`p.pattern.yaml:6: did not find expected alphabetic or numeric character (an unquoted * or & starts a YAML alias or anchor: quote wildcards and operators, e.g. "*", "!high", ">1")`},
		"a YAML alias": {head + "  pattern:\n    spec: &s {a: b}\n    status: *s\n",
			`p.pattern.yaml:6: validate.pattern.status: YAML aliases (*name) are not allowed in patterns; quote a wildcard: "*"`},
		"a key twice": {head + "  pattern:\n    spec:\n      arch: arm64\n      arch: amd64\n",
			"p.pattern.yaml:7: validate.pattern.spec.arch: key \"arch\" appears twice in the same mapping"},
		"an empty file": {"",
			"p.pattern.yaml:1: the file is empty; declare kind: PatternPolicy and a validate rule"},
		"a list instead of a mapping": {"- kind: PatternPolicy\n",
			"p.pattern.yaml:1: a pattern policy is a mapping with kind: PatternPolicy and validate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("p.pattern.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("loaded; want error %q", tc.want)
			}
			if want, prefix := strings.CutSuffix(tc.want, "…"); prefix {
				if !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("error\n got %s\nwant %s…", err, want)
				}
			} else if err.Error() != tc.want {
				t.Fatalf("error\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestLoadReadsEveryPatternFileOfTheDirectory(t *testing.T) {
	valid := []byte("kind: PatternPolicy\nvalidate: {message: m, pattern: {a: b}}\n")
	got, err := Load(fstest.MapFS{
		"batch-priority-low.pattern.yaml":  {Data: valid},
		"teams/owner-label.pattern.yaml":   {Data: valid},
		"roles.yaml":                       {Data: []byte("not: a pattern")},
		"notes.yaml":                       {Data: []byte("- not a pattern either")},
		"..2026_11_22/stale.pattern.yaml":  {Data: []byte("broken: [")},
		".git/objects/x.pattern.yaml":      {Data: []byte("broken: [")},
		"teams/README.md":                  {Data: []byte("#")},
		"teams/owner-label.pattern.yaml.x": {Data: []byte("broken: [")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["batch-priority-low"] == nil || got["owner-label"].File != "teams/owner-label.pattern.yaml" {
		t.Fatalf("loaded %v, want batch-priority-low and owner-label", got)
	}
}

func TestLoadRefusesTwoPoliciesOfOneName(t *testing.T) {
	valid := []byte("kind: PatternPolicy\nvalidate: {message: m, pattern: {a: b}}\n")
	_, err := Load(fstest.MapFS{"a/owner.pattern.yaml": {Data: valid}, "b/owner.pattern.yaml": {Data: valid}})
	var le *problem.Problem
	if !errors.As(err, &le) || err.Error() != `b/owner.pattern.yaml:1: pattern policy "owner" is also defined by a/owner.pattern.yaml; names come from file names and must be unique` {
		t.Fatalf("error %v", err)
	}
}

func TestLoadRefusesAFileNameThatIsNoName(t *testing.T) {
	_, err := Parse("Batch_Low.pattern.yaml", []byte("kind: PatternPolicy\nvalidate: {message: m, pattern: {a: b}}\n"))
	if err == nil || !strings.HasPrefix(err.Error(), `Batch_Low.pattern.yaml:1: "Batch_Low" is not a usable policy name`) {
		t.Fatalf("error %v", err)
	}
}
