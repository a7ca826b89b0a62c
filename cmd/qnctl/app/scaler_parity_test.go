package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// qnctl eval judges a HorizontalQNScaler as qn-webhook's /validate does
// (the chart registers only the validating webhook for scalers, on CREATE
// and UPDATE): the same response body, byte for byte, given the object and
// flags or the review.
func TestEvalJudgesScalersAsTheWebhookDoes(t *testing.T) {
	sample, err := os.ReadFile("../../../config/samples/horizontalqnscaler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(sample)
	const query = `sum(rabbitmq_queue_messages_ready{queue="orders"})`
	if !strings.Contains(good, query) {
		t.Fatalf("the sample scaler no longer queries %s", query)
	}
	bad := strings.Replace(good, query, "sum(rate(x[5m])", 1)
	badAbort := good + "  stages:\n  - replicas: 4\n    durationSeconds: 60\n    abortWhen:\n    - query: up{\n      above: \"1\"\n"
	cases := map[string]struct {
		object, old string
		wantCode    int
		want        string
	}{
		"a scaler whose query parses is admitted": {object: good, wantCode: exitOK, want: `"allowed":true`},
		"a query that does not parse is refused with the parser's message": {object: bad, wantCode: exitFailed,
			want: `"message":"HorizontalQNScaler orders is invalid: spec.qnMetric.query: 1:16: parse error: unclosed left parenthesis","reason":"Invalid","code":422`},
		"an abort condition is parsed too":                     {object: badAbort, wantCode: exitFailed, want: `spec.stages[0].abortWhen[0].query`},
		"a query already stored is not judged again on UPDATE": {object: bad, old: bad, wantCode: exitOK, want: `"allowed":true`},
		"a query changed on UPDATE is judged":                  {object: bad, old: good, wantCode: exitFailed, want: `"code":422`},
	}
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			obj := filepath.Join(dir, "scaler.yaml")
			if err := os.WriteFile(obj, []byte(c.object), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"eval", obj, "--time", testTime, "-o", "review"}
			spec := requestSpec{}
			if spec.Input, err = parseDocument(obj, []byte(c.object)); err != nil {
				t.Fatal(err)
			}
			if c.old != "" {
				old := filepath.Join(dir, "old.yaml")
				if err := os.WriteFile(old, []byte(c.old), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--old", old)
				doc, err := parseDocument(old, []byte(c.old))
				if err != nil {
					t.Fatal(err)
				}
				spec.Old = &doc
			}
			review, err := spec.reviewBytes()
			if err != nil {
				t.Fatal(err)
			}
			want := string(askServerAnyStatus(t, server(t, now, 0), review, webhookValidate)[0])
			if !strings.Contains(want, c.want) {
				t.Fatalf("qn-webhook answered %s; want it to hold %s", want, c.want)
			}
			reviewFile := filepath.Join(dir, "review.json")
			if err := os.WriteFile(reviewFile, review, 0o644); err != nil {
				t.Fatal(err)
			}
			for way, args := range map[string][]string{
				"given the object and flags":             args,
				"given the review":                       {"eval", reviewFile, "-o", "review"},
				"given the review, asking both webhooks": {"eval", reviewFile, "-o", "review", "--webhook", "both"},
			} {
				code, out, errOut := run(t, "", args...)
				if code != c.wantCode || out != want+"\n" {
					t.Errorf("%s: qnctl exited %d and printed\n%s%s\nwant exit %d and qn-webhook's /validate answer\n%s", way, code, out, errOut, c.wantCode, want)
				}
				if strings.Contains(errOut, "not checked") {
					t.Errorf("%s: qnctl says a scaler is not checked: %s", way, errOut)
				}
			}
		})
	}
}

// A scaler's DELETE, and a scaler asked of the mutating webhook, are named
// as not checked: the chart registers neither.
func TestEvalNamesScalerRequestsTheWebhookIsNotSent(t *testing.T) {
	for name, extra := range map[string][]string{
		"a DELETE":                   {"--operation", "DELETE"},
		"the mutating webhook asked": {"--webhook", "mutate"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := run(t, "", append([]string{"eval", "../../../config/samples/horizontalqnscaler.yaml", "--time", testTime}, extra...)...)
			if code != exitBadInput || !strings.Contains(errOut, "not checked: ../../../config/samples/horizontalqnscaler.yaml (qn.dev/HorizontalQNScaler") {
				t.Errorf("exit %d, stderr %s", code, errOut)
			}
		})
	}
}
