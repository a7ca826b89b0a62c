package jsonwrite

import (
	"encoding/json"
	"math"
	"testing"
)

// Numbers with a fraction are written as json.Marshal writes them, which
// is what slog calls for them.
func TestFloatIsJSONMarshal(t *testing.T) {
	for _, v := range []float64{0, 1, -1, 0.001, 123.456, 1e-6, 9.99e-7, 1e-7, 2.5e-9, -3e-12, 1e20, 1e21, 1.5e300, 5e-324, math.MaxFloat64} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		o := Object{Quote: Slog}
		o.Float("x", v)
		if got := string(o.End()); got != `{"x":`+string(want)+`}` {
			t.Errorf("%v: %s, want %s", v, got, want)
		}
	}
}
