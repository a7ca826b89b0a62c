// Package cowcache is a small bounded cache for values every request
// looks up and few are ever added: reads take no lock, as the map is
// replaced, never changed, when a value is added.
package cowcache

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Cache maps keys to values, at most Size of them: past it, it starts
// over, so a caller sending ever new keys costs a miss each, not memory.
// The zero value is empty and ready to use. Values are shared by every
// reader and must not be changed once added.
type Cache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex // orders additions
}

// Size bounds what a Cache holds.
const Size = 256

// Get is the value added for k.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// GetBytes is Get for the string b holds, without allocating that string.
func GetBytes[V any](c *Cache[string, V], b []byte) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[string(b)]
		return v, ok
	}
	var zero V
	return zero, false
}

// Len is how many values c holds.
func (c *Cache[K, V]) Len() int {
	if m := c.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Add keeps v for k; each addition copies the map (at most Size entries).
func (c *Cache[K, V]) Add(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[K]V{}
	if m := c.m.Load(); m != nil && len(*m) < Size {
		next = maps.Clone(*m)
	}
	next[k] = v
	c.m.Store(&next)
}
