package webhook

import "sync"

// Request bodies are a review's largest single allocation (a tenth of
// its bytes), so their memory is kept between requests, in pools by
// capacity: minPooledBody << i for each class i. A body of unknown length
// or larger than the largest class gets an allocation of its own.
//
// A pooled body is given back when its request's handler returns. The
// only values that point into it are the request's RawExtensions
// (object, oldObject, options): decoded values, typed fields and cache
// keys are copies. So nothing may keep an Input's request past its
// decision without copying those bytes; the shadow, which judges later,
// copies them when it queues a request (shadow.Shadow.Submit).
const (
	minPooledBody     = 4 << 10
	pooledBodyClasses = 7 // up to 256 KiB
)

var bodyPools [pooledBodyClasses]sync.Pool

// poisonReleasedBodies overwrites a body when it is given back, so that a
// test reading a request's bytes after its handler returned reads garbage
// rather than, by luck, the same request. The webhook's tests set it.
var poisonReleasedBodies bool

// pooledBody is a body from a pool, given back with release.
type pooledBody struct {
	buf   []byte
	class int
}

// takeBody returns room for a body of n bytes from the pools, or nil when
// n is too large for them (the caller allocates).
func takeBody(n int64) *pooledBody {
	size := int64(minPooledBody)
	for class := range pooledBodyClasses {
		if n <= size {
			if b, ok := bodyPools[class].Get().(*pooledBody); ok {
				b.buf = b.buf[:0]
				return b
			}
			return &pooledBody{buf: make([]byte, 0, size), class: class}
		}
		size <<= 1
	}
	return nil
}

// release gives b back; its bytes must not be read again.
func (b *pooledBody) release() {
	if b == nil {
		return
	}
	if poisonReleasedBodies {
		for i := range b.buf {
			b.buf[i] = 'x'
		}
	}
	bodyPools[b.class].Put(b)
}
