package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := map[string]struct {
		in   string
		max  int
		want string
	}{
		"a string that fits is returned as is":           {in: "alice", max: 5, want: "alice"},
		"a longer one keeps its head and counts the cut": {in: "abcdefghij", max: 4, want: "abcd…(+6 bytes)"},
		"a cut never splits a UTF-8 character":           {in: "aé€x", max: 4, want: "aé…(+4 bytes)"},
		"a cut inside the first character keeps nothing": {in: "€€", max: 2, want: "…(+6 bytes)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := String(tc.in, tc.max)
			if got != tc.want {
				t.Fatalf("String(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("String(%q, %d) = %q is not valid UTF-8", tc.in, tc.max, got)
			}
		})
	}
}

func TestAMegabyteBecomesAFieldWithAMarker(t *testing.T) {
	got := String(strings.Repeat("u", 1<<20), FieldBytes)
	want := strings.Repeat("u", FieldBytes) + "…(+1048320 bytes)"
	if got != want {
		t.Fatalf("got %d bytes ending %q, want %d bytes", len(got), got[len(got)-20:], len(want))
	}
}

func TestMiddleKeepsWhatAndWhy(t *testing.T) {
	got := Middle(`annotation qn-role="`+strings.Repeat("x", 10000)+`" names no known role`, 100)
	if !strings.HasPrefix(got, `annotation qn-role="xxx`) || !strings.HasSuffix(got, `" names no known role`) || !strings.Contains(got, "…(+99") {
		t.Fatalf("got %q", got)
	}
	if got := Middle("short", 100); got != "short" {
		t.Fatalf("a string that fits is returned as is, got %q", got)
	}
	if got := Middle("€€€€€€€€", 10); !utf8.ValidString(got) {
		t.Fatalf("Middle never splits a character, got %q", got)
	}
}

func TestStrings(t *testing.T) {
	tests := map[string]struct {
		in       []string
		want     []string
		sameList bool
	}{
		"a list that fits is the same list": {in: []string{"a", "bb"}, want: []string{"a", "bb"}, sameList: true},
		"long entries keep head and tail":   {in: []string{"a", "bbbbc"}, want: []string{"a", "bbb…(+2 bytes)"}},
		"entries past the limit are counted": {
			in: []string{"a", "b", "c", "d", "e"}, want: []string{"a", "b", "c", "…(+2 more)"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Strings(tc.in, 3, 3)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if tc.sameList && &got[0] != &tc.in[0] {
				t.Fatal("a list that fits was copied")
			}
		})
	}
}

func TestBytesIsStringForBytes(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("x", 200), strings.Repeat("é", 100)} {
		for _, max := range []int{0, 1, 5, 120, 300} {
			if got, want := Bytes([]byte(s), max), String(s, max); got != want {
				t.Errorf("Bytes(%d bytes, %d) = %q, want String's %q", len(s), max, got, want)
			}
		}
	}
}
