package window

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults for MemoryOptions fields left at zero.
const (
	DefaultMaxKeys       = 100_000
	DefaultShards        = 64
	DefaultSweepEvery    = 1024
	DefaultSweepInterval = 10 * time.Second
)

// minShrink is the key count below which a shard's map is never rebuilt:
// so small a map costs nothing worth an allocation.
const minShrink = 64

// maxShards bounds the shard array. Shards spread lock contention, which
// the goroutines running at once (GOMAXPROCS) bound, far below this on
// any node; more shards would only cost memory.
const maxShards = 1024

// tailProbe is how many keys from the least-recently-used end are checked
// for idleness before a full shard evicts a key that is still active.
const tailProbe = 8

// MemoryOptions tunes a MemoryStore. The zero value is ready to use.
type MemoryOptions struct {
	// MaxKeys caps how many keys the store remembers (default
	// DefaultMaxKeys), so that many distinct requesters cannot grow it
	// without bound. Each shard holds at most MaxKeys/Shards keys, so Len
	// never exceeds MaxKeys, and a shard can start evicting a little before
	// the whole store is full when keys hash unevenly.
	//
	// A full shard first evicts an idle key (nothing left in its window,
	// so nothing is forgotten). If none is found, it evicts the
	// least-recently-used key, and that forgets the key's history: its
	// requester gets a fresh window, i.e. the limit fails open for that key.
	// Stats().ActiveEvictions counts those; size MaxKeys above the number
	// of requesters active within the longest window. Worst-case memory is
	// about MaxKeys × Limit.Count × 16 bytes (the default with the realtime
	// role's 120 per minute, every key full: ~200 MB); typical keys hold a
	// few entries.
	MaxKeys int
	// Shards is the number of independently locked parts (default
	// DefaultShards), so requests of unrelated keys do not contend. It is
	// rounded down to a power of two and to at most MaxKeys.
	Shards int
	// SweepEvery is how many Takes a shard serves between sweeps that evict
	// its idle keys (default DefaultSweepEvery). A shard waits at least as
	// many Takes as it holds keys, which keeps a sweep's cost at O(1) per
	// Take and needs no goroutine. Idle keys are also reset lazily when they
	// are used again, and Sweep evicts them on demand.
	SweepEvery int
	// SweepInterval bounds how long a shard goes without a sweep while it
	// serves Takes (default DefaultSweepInterval), so that at a low request
	// rate idle keys leave within Period+SweepInterval rather than after
	// SweepEvery Takes, which at 200 requests/s across 64 shards was more
	// than five minutes. It costs at most one pass over a shard's keys per
	// interval.
	SweepInterval time.Duration
}

// MemoryStats is what a MemoryStore exposes for metrics.
type MemoryStats struct {
	// Keys is the number of keys held (as Len).
	Keys int
	// IdleEvictions counts keys dropped with nothing left in their window;
	// no decision changes because of them.
	IdleEvictions uint64
	// ActiveEvictions counts keys dropped to stay under MaxKeys while they
	// still had changes inside their window: each let a requester start
	// over, so a non-zero rate means MaxKeys is too small.
	ActiveEvictions uint64
}

// MemoryStore is the in-process Store: exact, but only for one replica,
// since each replica would keep its own windows. Time comes only from the
// injected clock, so tests step time instead of sleeping.
//
// Memory is bounded: a key holds at most Limit.Count entries and the uids of
// entries still in its window; idle keys are evicted; at most MaxKeys keys
// are held (see MemoryOptions.MaxKeys for what eviction of an active key
// means). It is safe for concurrent use.
type MemoryStore struct {
	clk  clock.PassiveClock
	base time.Time
	// seed makes key and uid hashes unpredictable to requesters, so nobody
	// can aim many keys at one shard; seed2 makes a key's second half.
	seed, seed2   maphash.Seed
	mask          uint64
	shards        []shard
	sweepEvery    int
	sweepInterval int64
}

var _ Store = (*MemoryStore)(nil)

// shard is one lock's worth of keys with its own least-recently-used list.
type shard struct {
	mu   sync.Mutex
	keys map[keyID]*keyLog
	// lru is the list's sentinel: lru.next is the most recently used key,
	// lru.prev the least.
	lru        keyLog
	maxKeys    int
	sinceSweep int
	lastSweep  int64
	// peakKeys is the most keys held since the map was last made: Go maps
	// keep their largest size, so a sweep that leaves a quarter of it
	// rebuilds the map and a burst of keys gives its memory back.
	peakKeys int
	idle     uint64
	active   uint64
	// Padding keeps neighbouring shards' mutexes off one cache line.
	_ [64]byte
}

// NewMemoryStore returns an empty store that reads time from clk (the real
// clock when nil).
func NewMemoryStore(clk clock.PassiveClock, opts MemoryOptions) *MemoryStore {
	if clk == nil {
		clk = clock.RealClock{}
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := opts.Shards
	if n <= 0 {
		n = DefaultShards
	}
	n = min(n, maxKeys, maxShards)
	n = 1 << (bits.Len(uint(n)) - 1)
	sweepEvery := opts.SweepEvery
	if sweepEvery <= 0 {
		sweepEvery = DefaultSweepEvery
	}
	sweepInterval := opts.SweepInterval
	if sweepInterval <= 0 {
		sweepInterval = DefaultSweepInterval
	}
	s := &MemoryStore{
		clk: clk,
		// Times are kept as offsets from base: with the real clock,
		// Sub uses the monotonic reading, so wall-clock steps do not
		// move windows.
		base:          clk.Now(),
		seed:          maphash.MakeSeed(),
		seed2:         maphash.MakeSeed(),
		mask:          uint64(n - 1),
		shards:        make([]shard, n),
		sweepEvery:    sweepEvery,
		sweepInterval: int64(sweepInterval),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.keys = make(map[keyID]*keyLog)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
		sh.maxKeys = maxKeys / n
	}
	return s
}

func (s *MemoryStore) now() int64 { return int64(s.clk.Now().Sub(s.base)) }

// keyID is what the store keeps of a key: 128 bits of two seeded hashes,
// 16 bytes whatever the key's length. Two keys share a window only if both
// halves collide, about n²/2¹²⁹ for n keys (10⁻²⁹ at 100,000 keys), and the
// seeds are unknown outside the process, so nobody can aim for it.
type keyID [2]uint64

func (s *MemoryStore) lookup(key string) (keyID, *shard) {
	id := keyID{maphash.String(s.seed, key), maphash.String(s.seed2, key)}
	return id, &s.shards[id[0]&s.mask]
}

// Peek implements Store. It reads under the shard lock but changes
// nothing, not even the key's recency.
func (s *MemoryStore) Peek(ctx context.Context, key string, limit Limit) (State, error) {
	if err := limit.Validate(); err != nil {
		return State{}, err
	}
	if err := ctx.Err(); err != nil {
		return State{}, fmt.Errorf("read rate window %q: %w", key, err)
	}
	id, sh := s.lookup(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.keys[id]
	if k == nil {
		return State{Limit: limit.Count, Period: limit.Period, Remaining: limit.Count}, nil
	}
	now := s.now()
	return k.state(now, limit, k.counted(now, limit)), nil
}

// Take implements Store. A canceled ctx takes no slot, as a shared store
// would not either.
func (s *MemoryStore) Take(ctx context.Context, key string, limit Limit, uid string) (Taken, error) {
	if err := limit.Validate(); err != nil {
		return Taken{}, err
	}
	if err := ctx.Err(); err != nil {
		return Taken{}, fmt.Errorf("take a slot in rate window %q: %w", key, err)
	}
	var uidHash uint64
	if uid != "" {
		uidHash = uidHashOf(maphash.String(s.seed, uid))
	}
	id, sh := s.lookup(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Time is read under the lock so that each key's log is recorded in
	// clock order.
	now := s.now()

	k := sh.keys[id]
	if k == nil {
		sh.makeRoom(now)
		k = &keyLog{id: id}
		sh.keys[id] = k
		sh.peakKeys = max(sh.peakKeys, len(sh.keys))
	} else {
		sh.unlink(k)
	}
	sh.pushFront(k)
	k.period = limit.Period
	// The shard is swept after k has taken this Limit's Period: a sweep
	// judges idleness by each key's last Period, and a reload that
	// lengthened it must not evict the changes this Take has to count.
	// k itself is never idle here: it holds a change inside the window.
	defer s.sweepIfDue(sh, now)

	k.drop(k.counted(now, limit))
	k.fit(limit.Count)
	if uid != "" && k.retry(uidHash) {
		return Taken{State: k.state(now, limit, 0), Admitted: true}, nil
	}
	if k.n >= limit.Count {
		return Taken{State: k.state(now, limit, 0)}, nil
	}
	at := k.push(entry{at: now, uidHash: uidHash}, limit.Count)
	r := Receipt{recorded: true, at: at, uidHash: uidHash}
	return Taken{State: k.state(now, limit, 0), Admitted: true, Receipt: r}, nil
}

// Release implements Store. It cannot fail: a key evicted since, or a
// change that has left the window, releases nothing.
func (s *MemoryStore) Release(_ context.Context, key string, r Receipt) error {
	if !r.recorded {
		return nil
	}
	id, sh := s.lookup(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := sh.keys[id]; k != nil {
		k.release(r.at, r.uidHash)
	}
	return nil
}

// TakeWith implements Counter: the window is in this process and cannot
// fail to answer, so onErr never applies.
func (s *MemoryStore) TakeWith(ctx context.Context, _ OnStoreError, key string, limit Limit, uid string) (Answer, error) {
	t, err := s.Take(ctx, key, limit, uid)
	return Answer{State: t.State, Admitted: t.Admitted, Receipt: t.Receipt}, err
}

// PeekWith implements Counter, as TakeWith.
func (s *MemoryStore) PeekWith(ctx context.Context, _ OnStoreError, key string, limit Limit) (Answer, error) {
	st, err := s.Peek(ctx, key, limit)
	return Answer{State: st}, err
}

// sweepIfDue sweeps sh once it has served as many Takes as it holds keys
// (at least SweepEvery), which keeps a sweep at O(1) per Take, or once
// SweepInterval has passed, which bounds how long idle keys stay at a low
// rate.
func (s *MemoryStore) sweepIfDue(sh *shard, now int64) {
	sh.sinceSweep++
	if sh.sinceSweep >= max(s.sweepEvery, len(sh.keys)) || now-sh.lastSweep >= s.sweepInterval {
		sh.sweep(now)
	}
}

// Len is the number of keys held, for tests and metrics.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// Stats reports the key count and evictions, for metrics.
func (s *MemoryStore) Stats() MemoryStats {
	var st MemoryStats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.keys)
		st.IdleEvictions += sh.idle
		st.ActiveEvictions += sh.active
		sh.mu.Unlock()
	}
	return st
}

// Sweep evicts every idle key now and returns how many it evicted. Takes
// sweep on their own; Sweep is for a caller that wants memory back from a
// store that has gone quiet.
func (s *MemoryStore) Sweep() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.sweep(s.now())
		sh.mu.Unlock()
	}
	return n
}

func (sh *shard) sweep(now int64) int {
	n := 0
	for _, k := range sh.keys {
		if k.idle(now) {
			sh.remove(k)
			n++
		}
	}
	sh.idle += uint64(n)
	sh.sinceSweep = 0
	sh.lastSweep = now
	if sh.peakKeys >= minShrink && len(sh.keys) <= sh.peakKeys/4 {
		keys := make(map[keyID]*keyLog, len(sh.keys))
		for id, k := range sh.keys {
			keys[id] = k
		}
		sh.keys, sh.peakKeys = keys, len(keys)
	}
	return n
}

// makeRoom evicts one key if the shard is full: an idle one if it can find
// one cheaply, else the least-recently-used key.
func (sh *shard) makeRoom(now int64) {
	if len(sh.keys) < sh.maxKeys {
		return
	}
	// The least recently used keys are the likeliest to be idle.
	k := sh.lru.prev
	for i := 0; i < tailProbe && k != &sh.lru; i++ {
		if k.idle(now) {
			sh.remove(k)
			sh.idle++
			return
		}
		k = k.prev
	}
	// Idle keys elsewhere (keys with shorter periods) are found by a full
	// sweep, allowed once per quarter of the shard's keys in Takes so that
	// a flood of new keys costs O(1) per Take.
	if sh.sinceSweep >= len(sh.keys)/4 && sh.sweep(now) > 0 {
		return
	}
	sh.remove(sh.lru.prev)
	sh.active++
}

func (sh *shard) remove(k *keyLog) {
	sh.unlink(k)
	delete(sh.keys, k.id)
}

func (sh *shard) unlink(k *keyLog) {
	k.prev.next = k.next
	k.next.prev = k.prev
	k.prev, k.next = nil, nil
}

func (sh *shard) pushFront(k *keyLog) {
	k.prev = &sh.lru
	k.next = sh.lru.next
	sh.lru.next.prev = k
	sh.lru.next = k
}
