package astjson

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

func BenchmarkZZEnvelope(b *testing.B) {
	body, err := os.ReadFile("../../test/load/testdata/realtime-create-allowed.json")
	if err != nil {
		b.Fatal(err)
	}
	var c bytes.Buffer
	json.Compact(&c, body)
	body = c.Bytes()
	empty := func() *Projection { return Only(map[string]*Projection{}) }
	cases := map[string]*Projection{
		"whole":         nil,
		"envelope-only": Every(map[string]*Projection{"request": Every(map[string]*Projection{"object": empty(), "oldObject": empty(), "options": empty()})}),
		"nothing":       Every(map[string]*Projection{"request": Only(map[string]*Projection{"object": empty(), "oldObject": empty()})}),
		"objects-only":  Every(map[string]*Projection{"request": Only(map[string]*Projection{"object": nil, "oldObject": nil})}),
	}
	for name, p := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := DecodeProjected(body, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
