package cowcache

import (
	"sync"
	"testing"
)

// Ever new keys from several goroutines: every reader finds what it added
// or misses, never a wrong value, and the cache never passes its bound.
func TestCacheStaysBoundedAndRight(t *testing.T) {
	var c Cache[string, int]
	if _, ok := c.Get("a"); ok {
		t.Fatal("an empty cache found a value")
	}
	c.Add("a", 1)
	if v, ok := GetBytes(&c, []byte("a")); !ok || v != 1 {
		t.Fatalf("GetBytes(a) = %d, %v", v, ok)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 * Size {
				k := string(rune('a'+g)) + string(rune(i))
				c.Add(k, i)
				if v, ok := c.Get(k); ok && v != i {
					t.Errorf("Get(%q) = %d, want %d", k, v, i)
					return
				}
				if n := c.Len(); n > Size {
					t.Errorf("the cache holds %d values, more than its bound %d", n, Size)
					return
				}
			}
		}()
	}
	wg.Wait()
}
