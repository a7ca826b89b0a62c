package pattern

import (
	"os"
	"regexp"
	"testing"
)

// patternBlock matches the pattern policies docs/policies.md shows: fenced
// YAML whose first line is "kind: PatternPolicy".
var patternBlock = regexp.MustCompile("(?s)```yaml\n(kind: PatternPolicy\n.*?)```")

// Every pattern policy docs/policies.md shows loads, so the examples a
// reader copies cannot rot.
func TestDocExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := patternBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 2 {
		t.Fatalf("found %d pattern policies in docs/policies.md, want at least 2", len(blocks))
	}
	for i, b := range blocks {
		if _, err := Parse("docs-example.pattern.yaml", []byte(b[1])); err != nil {
			t.Errorf("example %d of docs/policies.md does not load: %v\n%s", i+1, err, b[1])
		}
	}
}
