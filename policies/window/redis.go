package window

import (
	"context"
	"crypto/sha256"
	_ "embed" // the Lua scripts
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"
)

// DefaultRedisPrefix starts every key the RedisStore writes.
const DefaultRedisPrefix = "qn:window:"

var (
	//go:embed take.lua
	takeSource string
	//go:embed peek.lua
	peekSource string
	//go:embed release.lua
	releaseSource string

	// Run sends EVALSHA and falls back to EVAL (which caches the script)
	// when the server does not know it yet, e.g. after a restart.
	//
	// take.lua runs with a shebang on Redis 7 and later: a script declared
	// so, without allow-oom, is refused whole with an OOM error when Redis
	// is past its maxmemory, where a script without one (Redis 6's form)
	// runs and writes on, past the limit, under maxmemory-policy
	// noeviction. release.lua keeps the old form, so a slot can still be
	// given back (which frees memory) at the limit; peek.lua writes nothing.
	takeScript       = redis.NewScript("#!lua\n" + takeSource)
	legacyTakeScript = redis.NewScript(takeSource)
	peekScript       = redis.NewScript(peekSource)
	releaseScript    = redis.NewScript(releaseSource)
)

// ErrStoreOutOfMemory is wrapped by a Take that Redis refused because it
// is at its maxmemory and evicts nothing: no change is recorded.
var ErrStoreOutOfMemory = errors.New("redis is out of memory (used memory is over its maxmemory and its maxmemory-policy evicts nothing), so it records no change; give it more memory or an eviction policy such as volatile-ttl (every window key expires)")

// outOfMemory says whether err is Redis' OOM error reply.
func outOfMemory(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// noShebang says whether err is a Redis before 7 refusing take.lua's
// shebang line.
func noShebang(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Error compiling script") && strings.Contains(re.Error(), "'#'")
}

// RedisOptions tunes a RedisStore. The zero value is ready to use.
type RedisOptions struct {
	// Prefix starts every key (default DefaultRedisPrefix), so that one
	// Redis can serve several installations.
	Prefix string
	// Clock, when set, supplies the time of every call instead of the
	// Redis server's clock. Only tests set it, to step time as they do
	// with the MemoryStore; see RedisStore for why production uses the
	// server's clock.
	Clock clock.PassiveClock
}

// RedisStore keeps the windows in Redis, so that every replica of the
// webhook counts against one window per key: with N replicas a requester
// still gets Limit.Count changes per Period, not N times as many.
//
// Each key's window is one sorted set: a member per change (an 8-byte hash
// of the request uid, or random bytes for an empty uid), scored by the time
// it was recorded in microseconds. Take and Peek are one Lua script each,
// so a call is one round trip and atomic on the server: the same sliding
// log over (now-Period, now] as the MemoryStore, with the same retry-after,
// the same idempotence per uid and at most Limit.Count members per key. The
// key expires (PEXPIREAT) when its newest change leaves the window, so idle
// requesters cost nothing.
//
// Time is the Redis server's clock (the TIME command inside the script),
// not the replicas': every replica then agrees on the order of changes and
// on when a slot frees, whatever their clocks' skew, and the log stays
// ordered. The cost is that tests cannot step that clock; they inject one
// with RedisOptions.Clock, and the tests without a clock (exactness across
// processes, window edges under concurrency) wait in real time. Times have
// microsecond resolution; a Period is rounded up to a whole microsecond.
// One difference from the MemoryStore remains: when a reload lowers Count
// and several changes were recorded in the same microsecond, the ones
// trimmed are the lowest members rather than the first arrived, so which of
// those uids is still recognised as a retry may differ. The counts and
// retry-after are the same.
//
// Keys never contain a requester's name: see redisKey.
type RedisStore struct {
	client redis.Scripter
	prefix string
	clk    clock.PassiveClock
	// take is takeScript, or legacyTakeScript once a Redis before 7
	// refused the shebang; tests swap in other forms.
	take atomic.Pointer[redis.Script]
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore keeps windows through client (a *redis.Client, a
// *redis.ClusterClient or a *redis.Ring).
func NewRedisStore(client redis.Scripter, opts RedisOptions) *RedisStore {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	s := &RedisStore{client: client, prefix: prefix, clk: opts.Clock}
	s.take.Store(takeScript)
	return s
}

// runTake runs take.lua, in Redis 6's form once the server refused the
// shebang of Redis 7's.
func (s *RedisStore) runTake(ctx context.Context, keys []string, args ...any) ([]int64, error) {
	sc := s.take.Load()
	r, err := sc.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil && sc == takeScript && noShebang(err) {
		s.take.Store(legacyTakeScript)
		r, err = legacyTakeScript.Run(ctx, s.client, keys, args...).Int64Slice()
	}
	return r, err
}

// Take implements Store in one round trip. The Receipt's time is when,
// in the store's clock (µs since the Unix epoch), the change was recorded:
// tests check the sliding-log bound on those times.
func (s *RedisStore) Take(ctx context.Context, key string, limit Limit, uid string) (Taken, error) {
	if err := limit.Validate(); err != nil {
		return Taken{}, err
	}
	id, isUID := changeID(uid)
	r, err := s.runTake(ctx, []string{s.redisKey(key)},
		limit.Count, micros(limit.Period), id, isUID, s.now())
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("the script answered %d values, want 4", len(r))
	}
	if outOfMemory(err) {
		return Taken{}, fmt.Errorf("take a slot in rate window %q: %w (%w)", key, ErrStoreOutOfMemory, err)
	}
	if err != nil {
		return Taken{}, fmt.Errorf("take a slot in rate window %q: %w", key, err)
	}
	t := Taken{State: stateOf(limit, r[1], r[2]), Admitted: r[0] == 1}
	if r[3] != 0 {
		t.Receipt = Receipt{recorded: true, at: r[3], member: id}
	}
	return t, nil
}

// Release implements Store in one round trip.
func (s *RedisStore) Release(ctx context.Context, key string, r Receipt) error {
	if !r.recorded {
		return nil
	}
	err := releaseScript.Run(ctx, s.client, []string{s.redisKey(key)}, r.member, r.at).Err()
	if err != nil {
		return fmt.Errorf("give back a slot of rate window %q: %w", key, err)
	}
	return nil
}

// Peek implements Store: a read-only script, one round trip.
func (s *RedisStore) Peek(ctx context.Context, key string, limit Limit) (State, error) {
	if err := limit.Validate(); err != nil {
		return State{}, err
	}
	r, err := peekScript.Run(ctx, s.client, []string{s.redisKey(key)},
		limit.Count, micros(limit.Period), s.now()).Int64Slice()
	if err == nil && len(r) != 3 {
		err = fmt.Errorf("the script answered %d values, want 3", len(r))
	}
	if err != nil {
		return State{}, fmt.Errorf("read rate window %q: %w", key, err)
	}
	return stateOf(limit, r[1], r[2]), nil
}

// Load sends the scripts to the server (SCRIPT LOAD), so that the first
// requests do not each pay an EVAL of the whole script; call it at start.
// A server restarted later gets them back through Run's EVAL fallback.
func (s *RedisStore) Load(ctx context.Context) error {
	if err := s.take.Load().Load(ctx, s.client).Err(); noShebang(err) {
		s.take.Store(legacyTakeScript)
	}
	for _, sc := range []*redis.Script{s.take.Load(), peekScript, releaseScript} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("load the rate window scripts into Redis: %w", err)
		}
	}
	return nil
}

// Key is the Redis key that holds key's window, for tests and operators
// who look into Redis.
func (s *RedisStore) Key(key string) string { return s.redisKey(key) }

// redisKey names key's sorted set. The engine's keys read
// "<role>/<kind>/<subject>" (e.g. "realtime/user/<hash of the name>") or
// "<role>/role"; the Redis key keeps the role and kind readable, so an
// operator can tell what the keys are for, and replaces the rest by a
// fixed-size hash of the whole key:
//
//	qn:window:realtime:user:3f0c9e1a47b2d8c6e5f4a3b2c1d0e9f8
//
// so no user or namespace name is stored in Redis (even if a caller passed
// one) and every key has the same size. The hash covers the whole key, so
// two keys never share a window however their parts read. Characters
// outside [A-Za-z0-9._-] in the readable parts become "_": in particular no
// "{", which Redis Cluster would take for a hash tag and so put a whole
// role on one slot.
func (s *RedisStore) redisKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.Grow(len(s.prefix) + 2*maxLabel + 2 + 32)
	b.WriteString(s.prefix)
	parts := strings.SplitN(key, "/", 3)
	if len(parts) == 2 && parts[1] == "role" {
		parts = append(parts, "")
	}
	if len(parts) == 3 {
		writeLabel(&b, parts[0])
		b.WriteByte(':')
		writeLabel(&b, parts[1])
		b.WriteByte(':')
	}
	var h [32]byte
	hex.Encode(h[:], sum[:16])
	b.Write(h[:])
	return b.String()
}

// maxLabel bounds each readable part of a Redis key.
const maxLabel = 40

func writeLabel(b *strings.Builder, s string) {
	for i := 0; i < len(s) && i < maxLabel; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
}

// changeID is the member recorded for one change: the first 8 bytes of the
// uid's SHA-256, the same on every replica so a retry reaching another
// replica is recognised, or 8 random bytes for an empty uid, which is never
// a retry. 8 bytes keep a full realtime window (120 members) in Redis's
// compact listpack encoding; two uids in one window collide with a chance
// of about 1 in 10^15.
func changeID(uid string) (id string, isUID string) {
	var b [8]byte
	if uid == "" {
		binary.LittleEndian.PutUint64(b[:], rand.Uint64())
		return string(b[:]), "0"
	}
	sum := sha256.Sum256([]byte(uid))
	return string(sum[:8]), "1"
}

// now is the caller's time for the script, or "" for the server's clock.
func (s *RedisStore) now() string {
	if s.clk == nil {
		return ""
	}
	return strconv.FormatInt(s.clk.Now().UnixMicro(), 10)
}

// micros rounds d up to whole microseconds, so a window is never shorter
// than its Limit says.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

func stateOf(limit Limit, count, retryMicros int64) State {
	st := State{Count: int(count), Limit: limit.Count, Period: limit.Period, Remaining: limit.Count - int(count)}
	if st.Remaining <= 0 {
		st.Remaining = 0
		st.RetryAfter = time.Duration(retryMicros) * time.Microsecond
	}
	return st
}
