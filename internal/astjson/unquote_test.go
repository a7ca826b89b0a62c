package astjson

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// agreeOnString checks that the string literal "<text>" is refused or
// read alike by encoding/json and by this package, decoded or skipped.
func agreeOnString(t *testing.T, text string) {
	t.Helper()
	literal := `"` + text + `"`
	var want string
	wantErr := json.Unmarshal([]byte(literal), &want)

	got, err := Decode([]byte(literal))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: Decode error %v, encoding/json error %v", literal, err, wantErr)
	}
	if err == nil {
		if s, ok := got.(ast.String); !ok || string(s) != want {
			t.Fatalf("%q: Decode gives %v, encoding/json %q", literal, got, want)
		}
	}
	// The same string where no value is built for it.
	doc := `{"skipped":` + literal + `,"kept":1}`
	_, _, err = DecodeProjected([]byte(doc), Only(map[string]*Projection{"kept": nil}))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q skipped: error %v, encoding/json error %v", literal, err, wantErr)
	}
}

func TestStringsMeanWhatTheyMeanToEncodingJSON(t *testing.T) {
	for _, text := range []string{
		``, `plain`, `é`, `\u00e9`, `\"quoted\"`, `a\\b\/c\b\f\n\r\t`,
		`\ud83d\ude00`, `\ud83d`, `\ud83dx`, `\ude00\ud83d`, `\ud83d\u0041`, `\ud83d\ud83d\ude00`,
		"\xff", "a\xc3", "\xed\xa0\x80", "\xef\xbf\xbd", `\u`, `\u12`, `\u12g4`, `\x`, `\'`, "\x01", "tab\there",
		`\`, `{\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"n\"}}\n`,
		strings.Repeat(`\u00e9`, 2000), strings.Repeat("\xff", 3000), strings.Repeat(`\n`, 5000),
	} {
		agreeOnString(t, text)
	}
}

// An escape's error names the offending byte's offset.
func TestABadEscapeSaysWhere(t *testing.T) {
	_, err := Decode([]byte(`{"a":"ok\q"}`))
	if err == nil || !strings.Contains(err.Error(), "'q' at offset 9 in a string escape") {
		t.Errorf("error %v, want one naming 'q' at offset 9", err)
	}
	_, err = Decode([]byte(`{"a":"\u12x4"}`))
	if err == nil || !strings.Contains(err.Error(), "'x' at offset 10 in a string's \\u escape") {
		t.Errorf("error %v, want one naming 'x' at offset 10", err)
	}
}

func FuzzUnquoteMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`\ud83d\ude00`, `\u00e9x\n`, "\xff\xfe", `\ud800\u0041`, `a\/b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		agreeOnString(t, text)
	})
}
