package batchwrite

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an io.Writer that keeps every write separately.
type recorder struct {
	mu     sync.Mutex
	writes [][]byte
	err    error
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func (r *recorder) snapshot() (writes int, all string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes), string(bytes.Join(r.writes, nil))
}

func lines(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"msg":"admission decision","n":%d,"who":%q}`+"\n", i, prefix)
	}
	return out
}

func TestLinesOfOneIntervalGoOutInOneWriteInOrder(t *testing.T) {
	rec := &recorder{}
	w := New(rec, 50*time.Millisecond, 1<<20)
	want := lines(100, "a")
	for _, l := range want {
		if n, err := w.Write([]byte(l)); n != len(l) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(l))
		}
	}
	if n, _ := rec.snapshot(); n != 0 {
		t.Fatalf("%d writes reached the destination before the interval passed; want none", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, got := rec.snapshot()
		if n > 0 {
			if n != 1 || got != strings.Join(want, "") {
				t.Fatalf("after the interval: %d writes, %q; want one write of the 100 lines in order", n, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing was written 5s after an interval of 50ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The timer re-arms for the next line.
	if _, err := w.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	for {
		if n, got := rec.snapshot(); n == 2 {
			if !strings.HasSuffix(got, "late\n") {
				t.Fatalf("second batch: %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a line written after the first batch was never written")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReachingTheLimitWritesAtOnce(t *testing.T) {
	rec := &recorder{}
	w := New(rec, time.Hour, 90)
	for _, l := range lines(3, "b") { // 46 bytes each
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	n, got := rec.snapshot()
	if n != 1 || got != strings.Join(lines(2, "b"), "") {
		t.Fatalf("with a 90-byte limit and an hour's interval: %d writes %q; want the first two lines, written when they reached the limit", n, got)
	}
}

func TestCloseWritesWhatIsPendingAndThenWritesThrough(t *testing.T) {
	rec := &recorder{}
	w := New(rec, time.Hour, 1<<20)
	_, _ = w.Write([]byte("one\n"))
	_, _ = w.Write([]byte("two\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n, got := rec.snapshot(); n != 1 || got != "one\ntwo\n" {
		t.Fatalf("after Close: %d writes %q; want one write of both lines", n, got)
	}
	_, _ = w.Write([]byte("after\n"))
	if n, got := rec.snapshot(); n != 2 || got != "one\ntwo\nafter\n" {
		t.Fatalf("a Write after Close: %d writes %q; want it written at once", n, got)
	}
}

func TestNoIntervalWritesThrough(t *testing.T) {
	rec := &recorder{}
	w := New(rec, 0, 1<<20)
	for _, l := range lines(3, "c") {
		_, _ = w.Write([]byte(l))
	}
	if n, _ := rec.snapshot(); n != 3 {
		t.Fatalf("interval 0: %d writes; want each of the 3 written at once", n)
	}
}

func TestConcurrentWritersKeepEachLineWhole(t *testing.T) {
	rec := &recorder{}
	w := New(rec, time.Millisecond, 4096)
	var wg sync.WaitGroup
	const writers, each = 8, 500
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, l := range lines(each, fmt.Sprint("g", g)) {
				if _, err := w.Write([]byte(l)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, got := rec.snapshot()
	all := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(all) != writers*each {
		t.Fatalf("%d lines written; want %d", len(all), writers*each)
	}
	next := map[string]int{}
	for _, l := range all {
		var n int
		var who string
		if _, err := fmt.Sscanf(l, `{"msg":"admission decision","n":%d,"who":%q}`, &n, &who); err != nil {
			t.Fatalf("a line was cut or mixed with another: %q (%v)", l, err)
		}
		if n != next[who] {
			t.Fatalf("writer %s: line %d came where %d was due: one writer's lines must stay in order", who, n, next[who])
		}
		next[who]++
	}
}

func TestCloseReportsAFailedTimedWrite(t *testing.T) {
	broken := errors.New("disk full")
	rec := &recorder{err: broken}
	w := New(rec, time.Millisecond, 1<<20)
	_, _ = w.Write([]byte("lost\n"))
	time.Sleep(50 * time.Millisecond)
	if err := w.Close(); !errors.Is(err, broken) {
		t.Fatalf("Close = %v; want the timed write's error %v", err, broken)
	}
}
