package harness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The shipped build leaves gin's MessagePack codec out (BuildTags), and the
// Makefile builds with the same tags as the tests.
func TestShippedBuildLeavesOutTheMessagePackCodec(t *testing.T) {
	const codec = "github.com/ugorji/go/codec"
	deps := func(tags string) []string {
		cmd := exec.CommandContext(context.Background(), "go", "list", "-deps", "-tags", tags, "./cmd/qn-webhook")
		cmd.Dir = ModuleRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q: %v", tags, err)
		}
		return strings.Fields(string(out))
	}
	has := func(pkgs []string) bool {
		for _, p := range pkgs {
			if p == codec {
				return true
			}
		}
		return false
	}
	// Without the tags gin links the codec; with them it must not, or the
	// tag has stopped doing anything (a gin upgrade renamed it).
	if !has(deps("")) {
		t.Logf("%s is not linked even without tags: gin no longer needs nomsgpack", codec)
	}
	if has(deps(BuildTags)) {
		t.Errorf("qn-webhook built with -tags %s still links %s", BuildTags, codec)
	}

	makefile, err := os.ReadFile(filepath.Join(ModuleRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BUILD_TAGS \?= (.*)$`).FindSubmatch(makefile)
	switch {
	case m == nil:
		t.Errorf("the Makefile has no BUILD_TAGS ?= line; it must build with %q, as the tests do", BuildTags)
	case strings.TrimSpace(string(m[1])) != BuildTags:
		t.Errorf("the Makefile's BUILD_TAGS is %q; it must be %q, as the tests build", m[1], BuildTags)
	}
}
