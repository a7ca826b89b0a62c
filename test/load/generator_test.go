package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeWebhook answers like the ceiling and records what it saw.
type fakeWebhook struct {
	mu       sync.Mutex
	uids     map[string]int
	users    map[string]int
	paths    map[string]int
	inFlight atomic.Int32
	peak     atomic.Int32
	// delay, when set, is how long request n (from 1) takes.
	delay func(n int) time.Duration
	count atomic.Int32
	// answer, when set, replaces the uid echoed.
	answer func(uid string) string
}

func newFakeWebhook() *fakeWebhook {
	return &fakeWebhook{uids: map[string]int{}, users: map[string]int{}, paths: map[string]int{}}
}

func (f *fakeWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.count.Add(1))
	cur := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if cur <= p || f.peak.CompareAndSwap(p, cur) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	var rev struct {
		Request struct {
			UID      string `json:"uid"`
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &rev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.uids[rev.Request.UID]++
	f.users[rev.Request.UserInfo.Username]++
	f.paths[r.URL.Path]++
	f.mu.Unlock()
	if f.delay != nil {
		time.Sleep(f.delay(n))
	}
	uid := rev.Request.UID
	if f.answer != nil {
		uid = f.answer(uid)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, uid)
}

func startFake(t *testing.T, f *fakeWebhook) *Target {
	t.Helper()
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // cancelled runs drop connections mid-handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return &Target{Name: "fake", BaseURL: srv.URL, ValidatePath: "/validate", MutatePath: "/mutate", RootCAs: pool}
}

func TestClosedLoopSendsFreshUIDsAtTheGivenConcurrency(t *testing.T) {
	fake := newFakeWebhook()
	fake.delay = func(int) time.Duration { return time.Millisecond }
	c := NewClient(startFake(t, fake), 4)
	c.Users = 5
	defer c.Close()
	fixtures := loadTestFixtures(t)
	calls := append(Mix(fixtures, false), Mix(fixtures, true)...)
	res, err := c.Run(context.Background(), Load{Calls: calls, Concurrency: 4, Duration: time.Minute, MaxRequests: 300})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 300 || res.Errors != 0 || len(res.Latencies) != 300 {
		t.Fatalf("requests %d errors %d (%v) latencies %d, want 300, 0, 300", res.Requests, res.Errors, res.FirstErrors, len(res.Latencies))
	}
	if len(fake.uids) != 300 {
		t.Errorf("%d distinct uids in 300 requests", len(fake.uids))
	}
	if len(fake.users) != 5 {
		t.Errorf("%d distinct users, want the pool of 5", len(fake.users))
	}
	if fake.paths["/validate"] == 0 || fake.paths["/mutate"] == 0 || len(fake.paths) != 2 {
		t.Errorf("paths %v, want /validate and /mutate", fake.paths)
	}
	if p := fake.peak.Load(); p > 4 {
		t.Errorf("%d requests in flight at once, want at most 4", p)
	}
	// A second run goes on with new uids: a repeated uid would be a retry.
	if _, err := c.Run(context.Background(), Load{Calls: calls, Concurrency: 2, Duration: time.Minute, MaxRequests: 50}); err != nil {
		t.Fatal(err)
	}
	if len(fake.uids) != 350 {
		t.Errorf("%d distinct uids after 350 requests in two runs", len(fake.uids))
	}
}

func TestOpenLoopCountsLatencyFromTheIntendedSendTime(t *testing.T) {
	// The server stalls on its first request for 150 ms. Requests are due
	// every 10 ms and only one may be in flight, so the ones due during the
	// stall wait, and their latency must include the wait: a generator that
	// measured from the actual send would report about 0 for them.
	const stall = 150 * time.Millisecond
	fake := newFakeWebhook()
	fake.delay = func(n int) time.Duration {
		if n == 1 {
			return stall
		}
		return 0
	}
	c := NewClient(startFake(t, fake), 1)
	defer c.Close()
	res, err := c.Run(context.Background(), Load{Calls: Mix(loadTestFixtures(t), false), Concurrency: 1, Rate: 100, Duration: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 40 || res.Errors != 0 {
		t.Fatalf("requests %d errors %d (%v), want 40 due in 400ms at 100/s and no errors", res.Requests, res.Errors, res.FirstErrors)
	}
	// Request 2 was due 10 ms after the start and could only be sent after
	// the stall: at least 140 ms late, all of it latency.
	second := res.Latencies[len(res.Latencies)-2]
	if second < stall-10*time.Millisecond-time.Millisecond {
		t.Errorf("the second-worst latency is %s; the request queued behind the stall should show about %s", second, stall-10*time.Millisecond)
	}
	if res.MaxLag < stall-10*time.Millisecond-time.Millisecond {
		t.Errorf("MaxLag %s, want the time requests waited behind the stall", res.MaxLag)
	}
}

func TestWrongAnswersAreCountedNotFatal(t *testing.T) {
	fake := newFakeWebhook()
	fake.answer = func(uid string) string { return "not-" + uid }
	c := NewClient(startFake(t, fake), 2)
	defer c.Close()
	res, err := c.Run(context.Background(), Load{Calls: Mix(loadTestFixtures(t), false), Concurrency: 2, Duration: time.Minute, MaxRequests: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 20 || res.Errors != 20 {
		t.Fatalf("requests %d errors %d, want 20 and 20", res.Requests, res.Errors)
	}
	if len(res.FirstErrors) != maxFirstErrors || !strings.Contains(res.FirstErrors[0], "want the request's") {
		t.Errorf("first errors %q", res.FirstErrors)
	}
}

func TestARunEndsWithItsDurationOrItsContext(t *testing.T) {
	fake := newFakeWebhook()
	c := NewClient(startFake(t, fake), 2)
	defer c.Close()
	calls := Mix(loadTestFixtures(t), false)
	start := time.Now()
	res, err := c.Run(context.Background(), Load{Calls: calls, Concurrency: 2, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || time.Since(start) > 5*time.Second {
		t.Errorf("%d requests in %s, want some within the 100ms duration", res.Requests, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := c.Run(ctx, Load{Calls: calls, Concurrency: 2, Rate: 10, Duration: time.Hour}); err == nil {
		t.Error("a cancelled run returned no error")
	}
}

func TestLoadIsValidated(t *testing.T) {
	calls := Mix(loadTestFixtures(t), false)
	cases := map[string]Load{
		"no calls":        {Concurrency: 1, Duration: time.Second},
		"no concurrency":  {Calls: calls, Duration: time.Second},
		"no duration":     {Calls: calls, Concurrency: 1},
		"a negative rate": {Calls: calls, Concurrency: 1, Duration: time.Second, Rate: -1},
	}
	c := NewClient(&Target{BaseURL: "https://127.0.0.1:1"}, 1)
	for name, l := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := c.Run(context.Background(), l); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 1000; i++ {
		lat = append(lat, time.Duration(i))
	}
	cases := map[string]struct {
		p    float64
		want time.Duration
	}{
		"p50 of 1..1000 is 500":   {50, 500},
		"p99 of 1..1000 is 990":   {99, 990},
		"p99.9 of 1..1000 is 999": {99.9, 999},
		"p100 is the maximum":     {100, 1000},
		"p0 is the minimum":       {0, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := percentile(lat, tc.p); got != tc.want {
				t.Fatalf("got %d", got)
			}
		})
	}
	if percentile(nil, 50) != 0 {
		t.Error("no latencies must give 0")
	}
}
