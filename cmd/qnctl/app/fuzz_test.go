package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// FuzzEvalInput feeds arbitrary files to qnctl eval's path: parse the
// document (JSON or YAML, an AdmissionReview or an object), build the
// review, judge it with the bundled policies and print the text answer.
// Whatever the bytes: an error with a message, or an answer whose text
// holds no control characters and no bytes that are not UTF-8.
// testdata/fuzz/FuzzEvalInput holds inputs the fuzzer found worth keeping.
func FuzzEvalInput(f *testing.F) {
	for _, pattern := range []string{"testdata/inputs/*", "../../../test/testdata/*.json", "../../../test/load/testdata/*.json"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src)
		}
	}
	f.Add([]byte("apiVersion: qn.dev/v1alpha1\nkind: QuantumNode\nmetadata: {name: \"\\e[31m\", annotations: {qn-role: \"\\xff\"}}\nspec: {}\n"))
	ctx := context.Background()
	p, err := loadPolicies(ctx, "", &commonOptions{}, true)
	if err != nil {
		f.Fatal(err)
	}
	o := &evalOptions{Webhook: webhookBoth, Output: outputText}
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, src []byte) {
		doc, err := parseDocument("input", src)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an input error needs a message")
			}
			return
		}
		spec := &requestSpec{Input: doc}
		review, err := spec.reviewBytes()
		if err != nil {
			return
		}
		out, err := evaluate(ctx, p.Set, evalRequest{Review: review, Webhook: o.Webhook, Now: now})
		if err != nil {
			return
		}
		var b strings.Builder
		if err := writeEval(&b, p, out, o); err != nil {
			t.Fatalf("print the answer: %v", err)
		}
		// U+FFFD itself is printable: JSON decoding turns bad bytes into it.
		if !utf8.ValidString(b.String()) {
			t.Fatalf("the text answer is not valid UTF-8:\n%q", b.String())
		}
		for _, r := range b.String() {
			if unicode.IsControl(r) && r != '\n' && r != '\t' {
				t.Fatalf("the text answer holds %q:\n%q", r, b.String())
			}
		}
	})
}
