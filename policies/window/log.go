package window

import "time"

// entry is one recorded change: 16 bytes. Only the uid's hash is kept
// (seeded per store), not the uid: at 100,000 entries the strings were
// most of the process's heap, while the chance that a new change passes for
// a retry by a hash collision is about one in 10^14 per check. The hash's
// lowest bit is not part of it: it says a retry was admitted on the
// strength of this change, so Release must keep it (retriedBit).
type entry struct {
	at      int64 // nanoseconds since the store's base time
	uidHash uint64
}

// retriedBit marks an entry a retry of its uid relied on.
const retriedBit = 1

// uidHashOf is the hash an entry keeps for a uid: its lowest bit clear.
func uidHashOf(h uint64) uint64 { return h &^ retriedBit }

func (e entry) is(uidHash uint64) bool { return e.uidHash&^retriedBit == uidHash }

// keyLog is one key's sliding log: a ring buffer of its entries, oldest at
// head, in non-decreasing time order. It holds at most Limit.Count entries,
// and grows by half again so that a key with a large Count but few changes
// stays small.
type keyLog struct {
	id      keyID
	entries []entry
	head    int
	n       int
	// period is the Period of the last Take, kept only to tell whether the
	// key is idle when it is swept or evicted.
	period time.Duration

	// prev and next link the shard's least-recently-used list.
	prev, next *keyLog
}

// minEntries is the first ring size; small, since most keys never fill.
const minEntries = 4

func (k *keyLog) at(i int) int64 {
	j := k.head + i
	if j >= len(k.entries) {
		j -= len(k.entries)
	}
	return k.entries[j].at
}

func (k *keyLog) newest() int64 { return k.at(k.n - 1) }

// counted returns the logical index of the oldest entry that counts under
// limit at now. Entries before it have left the window (now-at >= Period)
// or lie beyond limit.Count after the Count was lowered; the latter are
// dropped because with limit.Count entries held the window is full either
// way, and a slot frees exactly when the oldest of the newest Count entries
// leaves, so the decisions are the same as with every entry kept.
func (k *keyLog) counted(now int64, limit Limit) int {
	// Binary search: the log is time-ordered, and Peek does not drop
	// what it skips, so a linear scan would redo that work on every call.
	period := int64(limit.Period)
	lo, hi := 0, k.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if now-k.at(mid) >= period {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if k.n-lo > limit.Count {
		lo = k.n - limit.Count
	}
	return lo
}

// state describes the window at now when the entries from logical index
// first on are the ones that count.
func (k *keyLog) state(now int64, limit Limit, first int) State {
	s := State{Count: k.n - first, Limit: limit.Count, Period: limit.Period}
	s.Remaining = limit.Count - s.Count
	if s.Remaining <= 0 {
		s.Remaining = 0
		s.RetryAfter = time.Duration(int64(limit.Period) - (now - k.at(first)))
	}
	return s
}

// drop forgets the m oldest entries, clearing them so the uids can be
// collected.
func (k *keyLog) drop(m int) {
	for ; m > 0; m-- {
		k.entries[k.head] = entry{}
		k.head++
		if k.head == len(k.entries) {
			k.head = 0
		}
		k.n--
	}
	if k.n == 0 {
		k.head = 0
	}
}

// fit shrinks the ring when the Count was lowered, so memory follows the
// current Limit, not the largest one ever seen. Call after drop has left at
// most count entries.
func (k *keyLog) fit(count int) {
	if len(k.entries) > count {
		k.resize(count)
	}
}

func (k *keyLog) resize(size int) {
	e := make([]entry, size)
	for i := 0; i < k.n; i++ {
		j := k.head + i
		if j >= len(k.entries) {
			j -= len(k.entries)
		}
		e[i] = k.entries[j]
	}
	k.entries, k.head = e, 0
}

// retry reports whether a counted entry carries uid, newest first since
// an apiserver retry follows its first attempt closely, and marks it: the
// retry is admitted on the strength of that entry, so it must stay counted
// even if the request that recorded it gives its slot back.
func (k *keyLog) retry(uidHash uint64) bool {
	for i := k.n - 1; i >= 0; i-- {
		j := k.head + i
		if j >= len(k.entries) {
			j -= len(k.entries)
		}
		if k.entries[j].is(uidHash) {
			k.entries[j].uidHash |= retriedBit
			return true
		}
	}
	return false
}

// release removes the entry recorded at at for uidHash, unless a retry
// relied on it, and reports whether it did. Entries after it move up one
// place, so the log stays in time order.
func (k *keyLog) release(at int64, uidHash uint64) bool {
	for i := k.n - 1; i >= 0; i-- {
		e := k.entries[k.index(i)]
		if e.at < at {
			return false
		}
		if e.at != at || e.uidHash != uidHash {
			continue
		}
		for ; i < k.n-1; i++ {
			k.entries[k.index(i)] = k.entries[k.index(i+1)]
		}
		k.entries[k.index(k.n-1)] = entry{}
		k.n--
		if k.n == 0 {
			k.head = 0
		}
		return true
	}
	return false
}

func (k *keyLog) index(i int) int {
	j := k.head + i
	if j >= len(k.entries) {
		j -= len(k.entries)
	}
	return j
}

// push records e and returns the time it was recorded at; the caller has
// checked that fewer than count entries are held. A time earlier than the
// newest entry (only a wall clock without a monotonic reading can step
// back) is recorded at the newest time instead, which keeps the log
// ordered and errs towards counting the change longer.
func (k *keyLog) push(e entry, count int) int64 {
	if k.n > 0 && e.at < k.newest() {
		e.at = k.newest()
	}
	if k.n == len(k.entries) {
		// Half again, not double: a key of 9 changes a minute holds a
		// 144-byte ring rather than 256, and growing stops at count.
		k.resize(min(max(len(k.entries)+len(k.entries)/2, minEntries), count))
	}
	k.entries[k.index(k.n)] = e
	k.n++
	return e.at
}

// idle reports whether nothing of this key is inside its window any more,
// so forgetting it changes no decision.
func (k *keyLog) idle(now int64) bool {
	return k.n == 0 || now-k.newest() >= int64(k.period)
}
