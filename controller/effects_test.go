package controller

import (
	"context"
	"testing"
	"time"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
)

func TestLookAgainFromAnAfterReachesTheResult(t *testing.T) {
	cases := map[string]struct {
		wishes []time.Duration
		want   time.Duration
	}{
		"no wish asks nothing":           {nil, 0},
		"one wish comes back":            {[]time.Duration{5 * time.Second}, 5 * time.Second},
		"the soonest of several wins":    {[]time.Duration{time.Minute, 5 * time.Second, 0}, 5 * time.Second},
		"a wish of zero or less is none": {[]time.Duration{0, -time.Second}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var fx Effects
			for _, d := range tc.wishes {
				fx.Then(func(ctx context.Context, _ *qnv1alpha1.QuantumNode) error {
					LookAgain(ctx, d)
					return nil
				})
			}
			got, err := fx.Run(context.Background(), &qnv1alpha1.QuantumNode{})
			if err != nil || got != tc.want {
				t.Fatalf("Run = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
