// Package batchwrite groups many small writes, such as log lines, into
// fewer large ones: a write is copied into memory and goes out with the
// others of the same few milliseconds in one write to the destination.
//
// The decision log writes one line per admission request; to a container's
// stdout each line is a write system call into a pipe and a wake-up of the
// runtime's log reader. Grouped, a busy webhook makes a write every
// interval instead of one per request. The price is stated: lines accepted
// but not yet written are lost if the process dies without Close (SIGKILL,
// an OOM kill, a crash) — at most one interval's worth, and never more
// than the size limit.
package batchwrite

import (
	"io"
	"sync"
	"time"
)

// Writer groups writes to out. Write never blocks on out unless pending
// bytes reach the size limit, in which case the writer that reached it
// writes them out itself (back-pressure, as an unbuffered writer gives).
// Each Write's bytes stay contiguous and in order. Safe for concurrent use.
type Writer struct {
	out      io.Writer
	interval time.Duration
	limit    int

	// flushing orders flushes: taken before mu, held across the write to
	// out, so batches reach out in the order they were cut.
	flushing sync.Mutex

	mu      sync.Mutex
	pending []byte
	// spare is the previous batch's buffer, reused for the next.
	spare  []byte
	armed  bool
	closed bool
	timer  *time.Timer
	// err is the first error a timed flush met, returned by Close.
	err error
}

// New returns a Writer that writes to out at most interval after a Write,
// or as soon as limit bytes are pending. interval <= 0 writes through.
func New(out io.Writer, interval time.Duration, limit int) *Writer {
	w := &Writer{out: out, interval: interval, limit: max(limit, 1)}
	w.timer = time.AfterFunc(time.Hour, w.timedFlush)
	w.timer.Stop()
	return w
}

// Write copies p to the pending batch; it returns an error only when it
// had to write the batch itself (the limit reached, or the Writer closed
// or writing through) and that failed.
func (w *Writer) Write(p []byte) (int, error) {
	if w.interval <= 0 {
		return w.out.Write(p)
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		// A line logged after Close (a late request during shutdown) is
		// written at once rather than lost, after the last batch.
		w.flushing.Lock()
		defer w.flushing.Unlock()
		return w.out.Write(p)
	}
	w.pending = append(w.pending, p...)
	full := len(w.pending) >= w.limit
	if !full && !w.armed {
		w.armed = true
		w.timer.Reset(w.interval)
	}
	w.mu.Unlock()
	if full {
		if err := w.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes the pending batch now.
func (w *Writer) Flush() error {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	w.mu.Lock()
	batch := w.pending
	w.pending, w.spare = w.spare[:0], nil
	w.armed = false
	w.mu.Unlock()
	if len(batch) == 0 {
		w.keep(batch)
		return nil
	}
	_, err := w.out.Write(batch)
	w.keep(batch)
	return err
}

// keep saves a written batch's buffer for reuse, unless it grew far past
// the limit (one huge line should not pin its memory).
func (w *Writer) keep(batch []byte) {
	if cap(batch) > 4*w.limit {
		return
	}
	w.mu.Lock()
	if w.spare == nil {
		w.spare = batch[:0]
	}
	w.mu.Unlock()
}

func (w *Writer) timedFlush() {
	if err := w.Flush(); err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
}

// Close writes what is pending and makes later Writes write through. It
// returns the first error a write to out met since New.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	w.timer.Stop()
	w.mu.Unlock()
	err := w.Flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	return err
}
