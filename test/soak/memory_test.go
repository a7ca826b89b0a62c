package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// memorySample is the server's memory at one moment of the soak.
type memorySample struct {
	at time.Duration
	// rss is VmRSS, anon and file its split (allocated memory, pages of
	// the binary); heapInUse is go_memstats_heap_inuse_bytes from its
	// /metrics (0 when the scrape failed): the Go heap alone, which RSS
	// follows only loosely (the runtime returns freed pages lazily).
	rss, anon, file, heapInUse uint64
}

// memorySampler reads the server's memory every interval until stopped.
type memorySampler struct {
	mu      sync.Mutex
	samples []memorySample
	stop    context.CancelFunc
	done    chan struct{}
}

func sampleMemory(pid int, metricsURL string, interval time.Duration) *memorySampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &memorySampler{stop: cancel, done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			st, err := harness.ReadProc(pid)
			if err != nil {
				continue
			}
			heap, _ := scrapeGauge(ctx, metricsURL, "go_memstats_heap_inuse_bytes")
			s.mu.Lock()
			s.samples = append(s.samples, memorySample{at: time.Since(start), rss: st.RSS, anon: st.RSSAnon, file: st.RSSFile, heapInUse: uint64(heap)})
			s.mu.Unlock()
		}
	}()
	return s
}

// Stop ends sampling and returns the samples.
func (s *memorySampler) Stop() []memorySample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// steady is the first sample at or after from: the baseline of a long
// soak, once rate windows, connection pools and policy sets have reached
// their steady size (a 2 s warm-up does not fill a 60 s window).
func steady(samples []memorySample, from time.Duration) (memorySample, bool) {
	for _, s := range samples {
		if s.at >= from {
			return s, true
		}
	}
	return memorySample{}, false
}

// series is the samples as "0m RSS(anon+file)/heap", for the log.
func series(samples []memorySample, every int) string {
	var b strings.Builder
	for i, s := range samples {
		if i%every != 0 && i != len(samples)-1 {
			continue
		}
		fmt.Fprintf(&b, " %s %.1f(%.1f+%.1f)/%.1f", s.at.Round(time.Second), mib(s.rss), mib(s.anon), mib(s.file), mib(s.heapInUse))
	}
	return strings.TrimSpace(b.String())
}

// saveHeapProfile writes the server's Go heap profile (after a GC) to
// file; the server runs with --pprof.
func saveHeapProfile(ctx context.Context, probeURL, file string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probeURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// scrapeGauge reads one unlabelled sample from a Prometheus text page.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}
