package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quantumnode/qn-admission/rego"
)

// rolesWith is the test directory's role table with pkg listed by role
// standard, so that no warning but the type check's is expected.
func rolesWith(pkg string) string {
	return "defaultRole: standard\nroles:\n  standard:\n    operations: [CREATE, UPDATE, DELETE]\n    packages: [demo.nodes, demo.label, " + pkg + "]\n" +
		"  strict:\n    operations: [CREATE]\n    window: {limit: 2, period: 30s, key: namespace}\n    packages: [demo.nodes, demo.strict, demo.label]\n    parameters:\n      owners: [alice]\n"
}

const misspelt = `package demo.typo

deny contains "a QuantumNode needs a service" if {
	input.request.operation == "CREATE"
	count(input.request.object.spec.servcies) == 0
}
`

func TestLintTypeChecksPoliciesAgainstTheInputSchema(t *testing.T) {
	runLintCases(t, map[string]lintCase{
		"a misspelt object field is a warning at its file, line and column, with what the schema has there": {
			edits:    map[string]string{"typo.rego": misspelt, "roles.yaml": rolesWith("demo.typo")},
			wantCode: exitOK,
			want: []string{
				"typo.rego:5:8: warning: undefined ref: input.request.object.spec.servcies; input.request.object.spec has: hardware, nodeName, progressDeadlineSeconds, revisionHistoryLimit, services",
				"hint: fix the path or the type (qnctl lint --print-schema shows the input's schema)",
				"ok with 1 warning", "input type-checked against QuantumNode qn.dev/v1alpha1",
			},
		},
		"--strict fails on it": {
			edits:    map[string]string{"typo.rego": misspelt, "roles.yaml": rolesWith("demo.typo")},
			args:     []string{"--strict"},
			wantCode: exitFailed,
			want:     []string{"typo.rego:5:8: warning: undefined ref: input.request.object.spec.servcies"},
		},
		"through a variable, in metadata, the userInfo and the context": {
			edits: map[string]string{"typo.rego": `package demo.typo

deny contains "x" if {
	spec := input.request.object.spec
	spec.hardware.arch.bits > 32
	input.request.oldObject.metadata.lables.team == "a"
	"admins" in input.request.userInfo.group
	input.context.windw.count > 1
}
`, "roles.yaml": rolesWith("demo.typo")},
			wantCode: exitOK,
			want: []string{
				"typo.rego:5:2: warning: undefined ref: spec.hardware.arch.bits; spec.hardware.arch is string",
				"typo.rego:6:2: warning: undefined ref: input.request.oldObject.metadata.lables.team; input.request.oldObject.metadata has: annotations, creationTimestamp,",
				"typo.rego:7:14: warning: undefined ref: input.request.userInfo.group; input.request.userInfo has: extra, groups, uid, username",
				"typo.rego:8:2: warning: undefined ref: input.context.windw.count; input.context has: annotations, dryRun, extra, groups, kind, labels, name, namespace, operation, resource, role, subResource, time, uid, user, userUID, window",
				"ok with 4 warnings",
			},
		},
		"what policies legitimately read is clean: labels, annotations, userInfo, the window, the stored object, options, status": {
			edits: map[string]string{"reads.rego": `package demo.reads

warn contains "near the limit" if {
	input.context.window.remaining < 3
	input.context.window.count >= input.context.window.limit - 3
	input.context.window.periodSeconds > 0
}

deny contains msg if {
	input.request.kind == {"group": "qn.dev", "version": "v1alpha1", "kind": "QuantumNode"}
	team := input.request.object.metadata.labels.team
	team != input.request.oldObject.metadata.labels["team"]
	not "qn:admins" in input.request.userInfo.groups
	not "teams" in input.request.userInfo.extra["scopes.example.com"]
	input.request.object.metadata.annotations["qn-role"] == input.context.role
	input.request.object.metadata.managedFields[_].manager != input.request.options.fieldManager
	input.request.object.status.phase != "Ready"
	some svc in input.request.object.spec.services
	svc.port < 1024
	input.context.time > input.request.object.metadata.creationTimestamp
	msg := sprintf("%s of %s (%s/%s, uid %s, %v) may not change team", [input.request.userInfo.username, input.context.user, input.request.namespace, input.request.name, input.request.uid, input.request.dryRun])
}

deny contains "crafted" if {
	# A shape the schema does not allow, read defensively: no type error.
	not is_array(input.request.object.spec.services)
	object.get(input.request.object, ["spec", "whatever"], null) != null
}
`, "roles.yaml": rolesWith("demo.reads")},
			wantCode: exitOK,
			clean:    true,
		},
		"a package for another kind declares its object's schema in a METADATA annotation": {
			edits: map[string]string{"pods.rego": `# METADATA
# scope: package
# schemas:
#   - input.request.object: {"type": "object", "properties": {"spec": {"type": "object", "properties": {"containers": {"type": "array"}}}}}
package demo.pods

deny contains "a Pod needs a container" if {
	input.request.kind.kind == "Pod"
	count(input.request.object.spec.containers) == 0
}
`, "roles.yaml": rolesWith("demo.pods")},
			wantCode: exitOK,
			clean:    true,
		},
		"without one, what it reads of a Pod is not a QuantumNode's": {
			edits: map[string]string{"pods.rego": `package demo.pods

deny contains "a Pod needs a container" if {
	input.request.kind.kind == "Pod"
	count(input.request.object.spec.containers) == 0
}
`, "roles.yaml": rolesWith("demo.pods")},
			wantCode: exitOK,
			want:     []string{"pods.rego:5:8: warning: undefined ref: input.request.object.spec.containers", "declares its schema in a METADATA annotation"},
		},
		"an annotation naming a schema --schema does not give": {
			edits: map[string]string{"pods.rego": "# METADATA\n# scope: package\n# schemas:\n#   - input.request.object: schema.pod\npackage demo.pods\n\ndeny contains \"x\" if input.request.object.spec.containers\n",
				"roles.yaml": rolesWith("demo.pods")},
			wantCode: exitOK,
			want:     []string{"pods.rego:7:1: warning: rego_type_error: undefined schema: schema.pod", "hint: pass --schema DIR"},
		},
		"--schema-check=false skips the check": {
			edits:    map[string]string{"typo.rego": misspelt, "roles.yaml": rolesWith("demo.typo")},
			args:     []string{"--schema-check=false", "--strict"},
			wantCode: exitOK,
			clean:    true,
		},
	})
}

func TestLintSchemaInJSONAndFromTheSchemaFlag(t *testing.T) {
	dir := copyDir(t, testPolicies, map[string]string{"typo.rego": misspelt, "roles.yaml": rolesWith("demo.typo")})
	code, out, _ := run(t, "", "lint", dir, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var r lintReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || r.Problems[0].File != "typo.rego" || r.Problems[0].Line != 5 || r.Problems[0].Column != 8 ||
		r.Problems[0].Severity != severityWarning || !strings.HasPrefix(r.Problems[0].Message, "undefined ref: input.request.object.spec.servcies;") {
		t.Errorf("problems %+v", r.Problems)
	}

	// --print-schema is the schema the check reads: the misspelt path is
	// not in it, the real one is.
	code, out, _ = run(t, "", "lint", "--print-schema")
	if code != exitOK {
		t.Fatalf("--print-schema: exit %d", code)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(out), &schema); err != nil {
		t.Fatalf("--print-schema: %v\n%s", err, out)
	}
	spec := schemaPath(schema, "request", "object", "spec")
	if spec == nil || spec["services"] == nil || spec["servcies"] != nil {
		t.Fatalf("--print-schema: request.object.spec has %v", spec)
	}

	// A schema file replaces the generated one: here one where spec is
	// any object, so the same policy is clean.
	object := schema["properties"].(map[string]any)["request"].(map[string]any)["properties"].(map[string]any)["object"].(map[string]any)
	delete(object["properties"].(map[string]any)["spec"].(map[string]any), "properties")
	js, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	open := string(js)
	file := writeFile(t, "input.json", open)
	if code, out, _ := run(t, "", "lint", dir, "--schema", file, "--strict"); code != exitOK || !strings.Contains(out, "input type-checked against "+file) {
		t.Errorf("--schema FILE: exit %d\n%s", code, out)
	}
	// A directory's input.json does the same; its other files are the
	// schemas annotations name.
	schemas := t.TempDir()
	if err := os.WriteFile(filepath.Join(schemas, "input.json"), []byte(open), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, "", "lint", dir, "--schema", schemas, "--strict"); code != exitOK {
		t.Errorf("--schema DIR with input.json: exit %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(schemas, "input.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(schemas, "pod.json"), []byte(`{"type": "object", "properties": {"spec": {"type": "object", "properties": {"containers": {"type": "array"}}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pods := copyDir(t, testPolicies, map[string]string{
		"pods.rego":  "# METADATA\n# scope: package\n# schemas:\n#   - input.request.object: schema.pod\npackage demo.pods\n\ndeny contains \"x\" if {\n\tinput.request.object.spec.containers\n\tinput.request.object.spec.containrs\n}\n",
		"roles.yaml": rolesWith("demo.pods"),
	})
	code, out, _ = run(t, "", "lint", pods, "--schema", schemas)
	if code != exitOK || strings.Count(out, ": warning:") != 1 ||
		!strings.Contains(out, "pods.rego:9:2: warning: undefined ref: input.request.object.spec.containrs; input.request.object.spec has: containers") ||
		!strings.Contains(out, "input type-checked against QuantumNode qn.dev/v1alpha1 and "+schemas) {
		t.Errorf("--schema DIR naming schema.pod: exit %d\n%s", code, out)
	}

	for name, args := range map[string][]string{
		"no such schema":           {"--schema", filepath.Join(t.TempDir(), "nope.json")},
		"a broken schema":          {"--schema", writeFile(t, "broken.json", "{")},
		"a schema that is not one": {"--schema", writeFile(t, "list.json", `{"type": 7}`)},
	} {
		code, out, errOut := run(t, "", append([]string{"lint", dir}, args...)...)
		if code == exitOK || !strings.Contains(errOut+out, args[1]) {
			t.Errorf("%s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
}

// schemaPath is the properties of the schema at path.
func schemaPath(s map[string]any, path ...string) map[string]any {
	for _, p := range path {
		props, _ := s["properties"].(map[string]any)
		s, _ = props[p].(map[string]any)
	}
	props, _ := s["properties"].(map[string]any)
	return props
}

// TestEveryPolicyWeShipTypeChecksClean: the type check adds no problem to
// the bundled policies, the chart's copy, README's walkthrough
// (docs/examples/my-policies) or the policy directories of qnctl's own
// tests: a false warning would teach users to ignore them.
func TestEveryPolicyWeShipTypeChecksClean(t *testing.T) {
	for _, dir := range []string{"", "../../../charts/qn-admission/files/policies", "../../../" + examplePolicies, testPolicies, "testdata/patterns"} {
		_, checked, _ := run(t, "", "lint", dir, "-o", "json")
		_, unchecked, _ := run(t, "", "lint", dir, "-o", "json", "--schema-check=false")
		var a, b lintReport
		if err := json.Unmarshal([]byte(checked), &a); err != nil {
			t.Fatalf("%s: %v\n%s", dir, err, checked)
		}
		if err := json.Unmarshal([]byte(unchecked), &b); err != nil {
			t.Fatalf("%s: %v\n%s", dir, err, unchecked)
		}
		if len(a.Problems) != len(b.Problems) || !strings.Contains(a.Checked, "input type-checked against QuantumNode") {
			t.Errorf("lint %q: the type check adds problems:\n%s", dir, checked)
		}
	}
}

// TestTheLoadSuitesOPAPolicyTypeChecksClean: the load suite's policy for
// OPA (kube-mgmt's input, an AdmissionReview) reads what ours do.
func TestTheLoadSuitesOPAPolicyTypeChecksClean(t *testing.T) {
	modules, err := rego.ReadModules(os.DirFS("../../../test/load/opa/policy"))
	if err != nil || len(modules) == 0 {
		t.Fatalf("%d modules, %v", len(modules), err)
	}
	schema, err := loadInputSchema("")
	if err != nil {
		t.Fatal(err)
	}
	if errs := rego.TypeCheck(modules, schema.set, rego.CompileOptions{}); len(errs) > 0 {
		t.Errorf("%v", errs)
	}
}

// TestDocumentedPoliciesTypeCheckClean type-checks every Rego example of
// README.md and docs/ beside the bundled policies they import (an example
// of a bundled package replaces it) and the examples of its document it
// imports: the input schema adds no error.
func TestDocumentedPoliciesTypeCheckClean(t *testing.T) {
	bundled, err := rego.ReadModules(os.DirFS("../../../rego/bundle"))
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("../../../docs/*.md")
	fence := regexp.MustCompile("(?s)```rego\n(.*?)```")
	pkg := regexp.MustCompile(`(?m)^package (\S+)`)
	schema, err := loadInputSchema("")
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	for _, doc := range append(docs, "../../../README.md") {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		// package -> source of the document's examples
		byPackage := map[string]string{}
		for i, m := range fence.FindAllStringSubmatch(string(src), -1) {
			name := pkg.FindStringSubmatch(m[1])
			if name == nil {
				t.Errorf("%s: example %d has no package", doc, i+1)
				continue
			}
			byPackage[name[1]] = m[1]
		}
		for name, example := range byPackage {
			examples++
			modules := []rego.Module{{Path: filepath.Base(doc) + ":" + name, Source: example}}
			for other, src := range byPackage {
				if other != name && strings.Contains(example, "import data."+other+"\n") {
					modules = append(modules, rego.Module{Path: filepath.Base(doc) + ":" + other, Source: src})
				}
			}
			for _, b := range bundled {
				if pkg.FindStringSubmatch(b.Source)[1] != name {
					modules = append(modules, b)
				}
			}
			// An example may be an excerpt (a helper left out): the check
			// is that the schema adds no error to those it has anyway.
			without := rego.TypeCheck(modules, nil, rego.CompileOptions{})
			if with := rego.TypeCheck(modules, schema.set, rego.CompileOptions{}); len(with) != len(without) {
				t.Errorf("%s: the example of package %s: %v", doc, name, with)
			}
		}
	}
	if examples < 3 {
		t.Errorf("found %d Rego examples in the docs; the README and docs/policies.md have at least 3", examples)
	}
}
