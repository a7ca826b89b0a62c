// Package soak runs the real qn-webhook at a steady rate for a while, with
// policy reloads (good and broken) and certificate rotations mixed in, and
// checks that every answer stays correct and memory does not grow.
package soak

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
	"github.com/quantumnode/qn-admission/test/load"
)

// TestSoak: SOAK_DURATION (default 10s, so make test runs a short one)
// of open-loop load at SOAK_RATE requests per second (default 200), every
// answer checked against its fixture, while the policy directory reloads
// every 5s (one push in four is broken and must be refused without
// effect) and the serving certificate rotates every 7s. Errors must be 0;
// RSS at the end must not exceed RSS after warm-up by more than half.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real qn-webhook under load")
	}
	duration := envDuration(t, "SOAK_DURATION", 10*time.Second)
	rate := envFloat(t, "SOAK_RATE", 200)
	ctx, cancel := context.WithTimeout(context.Background(), duration+5*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin, err := harness.Build(ctx, dir, "./cmd/qn-webhook")
	if err != nil {
		t.Fatal(err)
	}
	policyDir := filepath.Join(dir, "policies")
	copyDir(t, filepath.Join(harness.ModuleRoot(), "rego", "bundle"), policyDir)
	certDir := filepath.Join(dir, "certs")
	flags := []string{"--policy-dir", policyDir, "--policy-poll-interval", "1s", "--cert-poll-interval", "1s"}
	// SOAK_HEAP_PROFILES=dir keeps Go heap profiles of the server at the
	// steady-state point and at the end, to tell what grew (go tool pprof
	// -base steady.pb.gz end.pb.gz).
	profileDir := os.Getenv("SOAK_HEAP_PROFILES")
	var env []string
	if profileDir != "" {
		flags = append(flags, "--pprof")
		env = append(env, "GODEBUG=memprofilerate=4096") // finer than the default 512 KiB
	}
	server, err := load.StartWebhookWithEnv(load.NameWebhook, bin, certDir, env, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := server.Stop(); err != nil {
			t.Errorf("stop qn-webhook: %v\n%s", err, server.Logs())
		}
	})
	ca := newCA(t)
	server.RootCAs.AddCert(ca.cert)

	fixtures, err := load.LoadFixtures(load.DefaultFixtureDir(harness.ModuleRoot()))
	if err != nil {
		t.Fatal(err)
	}
	calls := append(load.Mix(fixtures, false), load.Mix(fixtures, true)...)
	client := load.NewClient(server.Target, 32)
	defer client.Close()

	// Warm up, then note memory.
	if _, err := client.Run(ctx, load.Load{Calls: calls, Concurrency: 8, Duration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	before, err := harness.ReadProc(server.PID)
	if err != nil {
		t.Fatal(err)
	}

	// Memory every 1/30 of the run (at least every second), RSS and the
	// Go heap, so that growth is told apart from filling up.
	probeAddress := server.LogField("serving admission webhooks", "probeAddress")
	sampler := sampleMemory(server.PID, "http://"+probeAddress+"/metrics", max(duration/30, time.Second))
	if profileDir != "" {
		heapProfile := func(name string) {
			if err := saveHeapProfile(ctx, "http://"+probeAddress, filepath.Join(profileDir, name)); err != nil {
				t.Errorf("heap profile %s: %v", name, err)
			}
		}
		steadyAt := time.AfterFunc(duration/6, func() { heapProfile("steady.pb.gz") })
		defer steadyAt.Stop()
		defer heapProfile("end.pb.gz")
	}

	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan churnCount, 1)
	go func() { churned <- churn(churnCtx, t, policyDir, certDir, ca) }()
	result, err := client.Run(ctx, load.Load{Calls: calls, Concurrency: 32, Rate: rate, Duration: duration, Timeout: 10 * time.Second})
	stopChurn()
	count := <-churned
	if err != nil {
		t.Fatal(err)
	}
	after, err := harness.ReadProc(server.PID)
	if err != nil {
		t.Fatal(err)
	}
	samples := sampler.Stop()

	t.Logf("soak %s at %.0f/s: %d requests, %d errors, p50 %s, p99 %s, max %s; %d policy pushes (%d broken), %d certificate rotations; RSS %.1f → %.1f MiB, peak %.1f MiB; server CPU %s",
		duration, rate, result.Requests, result.Errors, result.Percentile(50), result.Percentile(99), result.Percentile(100),
		count.pushes, count.broken, count.rotations, mib(before.RSS), mib(after.RSS), mib(after.HWM), after.CPU-before.CPU)
	if result.Errors != 0 {
		t.Errorf("%d of %d answers were wrong or failed; first: %v", result.Errors, result.Requests, result.FirstErrors)
	}
	if count.pushes == 0 || count.rotations == 0 {
		t.Errorf("the soak must mix in policy pushes and rotations, got %+v", count)
	}
	if after.RSS > before.RSS*3/2 {
		t.Errorf("RSS grew from %.1f to %.1f MiB during the soak", mib(before.RSS), mib(after.RSS))
	}
	t.Logf("memory, MiB RSS(anon+file)/heap in use: %s", series(samples, 3))
	// A long soak is flat when the end is within ±10 % of its steady state,
	// the first sample after a sixth of the run (5 minutes of 30).
	if base, ok := steady(samples, duration/6); ok && duration >= 3*time.Minute {
		t.Logf("steady state at %s: RSS %.1f MiB (anon %.1f, file %.1f), heap %.1f MiB; end: RSS %.1f MiB (%+.1f %%; anon %.1f, file %.1f), heap %.1f MiB",
			base.at.Round(time.Second), mib(base.rss), mib(base.anon), mib(base.file), mib(base.heapInUse), mib(after.RSS),
			100*(float64(after.RSS)/float64(base.rss)-1), mib(after.RSSAnon), mib(after.RSSFile), mib(samples[len(samples)-1].heapInUse))
		if float64(after.RSS) > 1.10*float64(base.rss) {
			t.Errorf("RSS grew from %.1f MiB at %s to %.1f MiB at the end: more than 10 %% over the steady state",
				mib(base.rss), base.at.Round(time.Second), mib(after.RSS))
		}
	}
}

type churnCount struct{ pushes, broken, rotations int }

// churn pushes a policy change every 5s (every fourth one broken, then
// fixed by the next) and rotates the serving certificate every 7s, as
// kubelet does for a Secret: a new directory, one atomic symlink swap.
func churn(ctx context.Context, t *testing.T, policyDir, certDir string, ca *testCA) churnCount {
	var n churnCount
	push := time.NewTicker(5 * time.Second)
	rotate := time.NewTicker(7 * time.Second)
	defer push.Stop()
	defer rotate.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-push.C:
			n.pushes++
			body := fmt.Sprintf("package soak\n\n# push %d\nrevision := %d\n", n.pushes, n.pushes)
			if n.pushes%4 == 0 {
				body = "package soak\n\nrevision := {\n" // a syntax error: refused, the last good set serves
				n.broken++
			}
			if err := writeAtomic(filepath.Join(policyDir, "soak.rego"), []byte(body)); err != nil {
				t.Errorf("push policies: %v", err)
			}
		case <-rotate.C:
			n.rotations++
			if err := ca.rotate(certDir, n.rotations); err != nil {
				t.Errorf("rotate the certificate: %v", err)
			}
		}
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "soak CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// rotate issues a new serving pair for 127.0.0.1 into a fresh directory
// and points certDir's tls.crt and tls.key at it through a "..data"
// symlink swapped atomically, the way kubelet updates a Secret volume.
func (ca *testCA) rotate(certDir string, n int) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(n) + 1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	version := fmt.Sprintf("..rotation_%d", n)
	if err := os.Mkdir(filepath.Join(certDir, version), 0o700); err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(certDir, version, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(certDir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(certDir, "..data")); err != nil {
		return err
	}
	// The first rotation turns the self-signed files into links through
	// ..data; later ones only swap ..data.
	for _, name := range []string{"tls.crt", "tls.key"} {
		target := filepath.Join("..data", name)
		if cur, err := os.Readlink(filepath.Join(certDir, name)); err == nil && cur == target {
			continue
		}
		link := filepath.Join(certDir, name+".tmp")
		if err := os.Symlink(target, link); err != nil {
			return err
		}
		if err := os.Rename(link, filepath.Join(certDir, name)); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q is not a positive duration such as 30m", name, v)
	}
	return d
}

func envFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		t.Fatalf("%s=%q is not a positive number", name, v)
	}
	return f
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
