package webhook

import (
	"fmt"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantumnode/qn-admission/internal/cowcache"
)

func TestKindCacheDecodesEachPairOnceAndStaysBounded(t *testing.T) {
	c := &kindCache{}
	raw := []byte(`{"group":"qn.dev","version":"v1alpha1","kind":"Quantum\u004eode"}`)
	want := metav1.GroupVersionKind{Group: "qn.dev", Version: "v1alpha1", Kind: "QuantumNode"}
	for range 2 {
		if got, ok := c.gvk(raw); !ok || got != want {
			t.Fatalf("gvk = %+v, %v; want %+v", got, ok, want)
		}
	}
	if n := c.gvks.Len(); n != 1 {
		t.Fatalf("the pair is not kept once: %d entries", n)
	}
	// What strict decoding refuses is refused and not kept.
	for _, bad := range []string{`{"group":"a","version":"v","kind":"K","extra":"x"}`, `{"group":1,"version":"v","kind":"K"}`, `"K"`, `null`, `{"group":"a",`} {
		if got, ok := c.gvk([]byte(bad)); ok {
			t.Errorf("gvk(%s) = %+v, want refused", bad, got)
		}
	}
	if n := c.gvks.Len(); n != 1 {
		t.Errorf("refused values were kept: %d entries", n)
	}
	// Ever new pairs, from several goroutines: answers stay right and the
	// cache never holds more than its bound.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * cowcache.Size {
				res := fmt.Sprintf("r%d-%d", g, i)
				got, ok := c.gvr([]byte(`{"group":"g","version":"v","resource":"` + res + `"}`))
				if !ok || got.Resource != res {
					t.Errorf("gvr of %s = %+v, %v", res, got, ok)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.gvrs.Len(); n > cowcache.Size {
		t.Errorf("the cache holds %d pairs, more than its bound %d", n, cowcache.Size)
	}
}
