package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestFileSourceServesAValidPair(t *testing.T) {
	ca := newTestCA(t, "test CA")
	p := ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, p)

	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)))
	if err := src.Healthy(); err == nil {
		t.Error("Healthy before any load = nil, want an error saying nothing is loaded")
	}
	if _, err := src.GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Error("GetCertificate before any load returned no error")
	}
	startSource(t, src)

	if got := servedSerial(src); !sameSerial(got, p.serial) {
		t.Errorf("served serial = %v, want %v", got, p.serial)
	}
	if err := src.Healthy(); err != nil {
		t.Errorf("Healthy = %v, want nil", err)
	}
	leaf := src.leaf()
	if leaf == nil || !sameSerial(leaf.SerialNumber, p.serial) {
		t.Fatalf("Current = %v, want the certificate with serial %v", leaf, p.serial)
	}
	if leaf.NotAfter.IsZero() {
		t.Error("leaf().NotAfter is zero")
	}
}

func TestFileSourceIsNotReadyBeforeALoad(t *testing.T) {
	src := NewFileSource(filepath.Join(t.TempDir(), "tls.crt"), filepath.Join(t.TempDir(), "tls.key"))
	if err := src.Ready(); err == nil {
		t.Fatal("Ready before any load = nil, want an error: nothing can be served")
	}
	if !src.NotAfter().IsZero() {
		t.Fatalf("NotAfter before any load = %v, want zero", src.NotAfter())
	}
}

func TestFileSourceRefusesToStartOnABadPair(t *testing.T) {
	ca := newTestCA(t, "test CA")
	good := ca.serving(t)
	other := ca.serving(t)

	tests := map[string]struct {
		// write lays out the files; a nil slice leaves the file missing.
		certPEM, keyPEM []byte
		// The error must name this file (cert or key) and say this.
		blame string
		want  string
	}{
		"a missing certificate file is named": {
			certPEM: nil, keyPEM: good.keyPEM,
			blame: "cert", want: "no such file",
		},
		"a missing key file is named": {
			certPEM: good.certPEM, keyPEM: nil,
			blame: "key", want: "no such file",
		},
		"a certificate file of garbage says it holds no PEM certificate": {
			certPEM: []byte("this is not PEM\n"), keyPEM: good.keyPEM,
			blame: "cert", want: "no CERTIFICATE PEM block",
		},
		"an empty certificate file says it is empty": {
			certPEM: []byte{}, keyPEM: good.keyPEM,
			blame: "cert", want: "is empty",
		},
		"a certificate PEM block that does not parse is named": {
			certPEM: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), keyPEM: good.keyPEM,
			blame: "cert", want: "parse serving certificate",
		},
		"a key file of garbage says it holds no PEM key": {
			certPEM: good.certPEM, keyPEM: []byte("garbage"),
			blame: "key", want: "no PRIVATE KEY PEM block",
		},
		"a key PEM block that does not parse is named": {
			certPEM: good.certPEM, keyPEM: []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
			blame: "key", want: "parse serving key",
		},
		"a key that belongs to another certificate is named": {
			certPEM: good.certPEM, keyPEM: other.keyPEM,
			blame: "key", want: "does not match the public key of certificate",
		},
		"swapped certificate and key files are recognised": {
			certPEM: good.keyPEM, keyPEM: good.certPEM,
			blame: "cert", want: "are the certificate and key files swapped?",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)
			if tc.certPEM != nil {
				writeFile(t, certFile, tc.certPEM)
			}
			if tc.keyPEM != nil {
				writeFile(t, keyFile, tc.keyPEM)
			}
			blamed := map[string]string{"cert": certFile, "key": keyFile}[tc.blame]

			src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)), WithPollInterval(fastPoll))
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			err := src.Start(ctx)
			if err == nil {
				t.Fatal("Start = nil, want an error")
			}
			if ctx.Err() != nil {
				t.Fatal("Start waited for the context instead of failing at once")
			}
			if !strings.Contains(err.Error(), blamed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start error = %q, want it to name %s and say %q", err, blamed, tc.want)
			}
			if herr := src.Healthy(); herr == nil || !strings.Contains(herr.Error(), tc.want) {
				t.Errorf("Healthy = %v, want the load error", herr)
			}
			if _, gerr := src.GetCertificate(&tls.ClientHelloInfo{}); gerr == nil {
				t.Error("GetCertificate returned no error with nothing loaded")
			}
		})
	}
}

func TestFileSourceServesRotatedPairs(t *testing.T) {
	type files struct{ certFile, keyFile string }
	tests := map[string]struct {
		poll time.Duration
		// setup lays out the first pair and returns the paths to serve and
		// a function that rotates to another pair.
		setup func(t *testing.T, first testPair) (files, func(testPair))
	}{
		"a plain rewrite of both files is seen by the directory watch": {
			poll: noPoll,
			setup: func(t *testing.T, first testPair) (files, func(testPair)) {
				dir := t.TempDir()
				f := files{filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)}
				rotate := func(p testPair) {
					writeFile(t, f.certFile, p.certPEM)
					writeFile(t, f.keyFile, p.keyPEM)
				}
				rotate(first)
				return f, rotate
			},
		},
		"an atomic rename of each file is seen by the directory watch": {
			poll: noPoll,
			setup: func(t *testing.T, first testPair) (files, func(testPair)) {
				dir := t.TempDir()
				f := files{filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)}
				rotate := func(p testPair) {
					for path, data := range map[string][]byte{f.certFile: p.certPEM, f.keyFile: p.keyPEM} {
						if err := writeFileAtomic(path, data, 0o600); err != nil {
							t.Fatal(err)
						}
					}
				}
				rotate(first)
				return f, rotate
			},
		},
		"a Secret volume update (..data symlink swap) is seen by the directory watch": {
			poll: noPoll,
			setup: func(t *testing.T, first testPair) (files, func(testPair)) {
				v := newSecretVolume(t, first)
				return files{v.certFile(), v.keyFile()}, func(p testPair) { v.update(t, p) }
			},
		},
		"a change behind a symlink into an unwatched directory is seen by polling": {
			poll: fastPoll,
			setup: func(t *testing.T, first testPair) (files, func(testPair)) {
				real, served := t.TempDir(), t.TempDir()
				f := files{filepath.Join(served, CertFileName), filepath.Join(served, KeyFileName)}
				rotate := func(p testPair) {
					writeFile(t, filepath.Join(real, "serving.pem"), p.certPEM)
					writeFile(t, filepath.Join(real, "serving-key.pem"), p.keyPEM)
				}
				rotate(first)
				if err := os.Symlink(filepath.Join(real, "serving.pem"), f.certFile); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(real, "serving-key.pem"), f.keyFile); err != nil {
					t.Fatal(err)
				}
				return f, rotate
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := newTestCA(t, "test CA")
			first := ca.serving(t)
			f, rotate := tc.setup(t, first)
			src := NewFileSource(f.certFile, f.keyFile, WithLogger(testLogger(t)), WithPollInterval(tc.poll))
			startSource(t, src)
			if got := servedSerial(src); !sameSerial(got, first.serial) {
				t.Fatalf("served serial = %v, want %v", got, first.serial)
			}
			// Rotate twice: the first rotation could race with the watch
			// being set up and be caught by Start's catch-up read; the second
			// can only be seen through the watch (or the poll).
			for i := range 2 {
				next := ca.serving(t)
				rotate(next)
				waitFor(t, fmt.Sprintf("rotation %d to be served", i+1), func() bool {
					return sameSerial(servedSerial(src), next.serial)
				})
				if err := src.Healthy(); err != nil {
					t.Errorf("Healthy after rotation = %v", err)
				}
				if !sameSerial(src.leaf().SerialNumber, next.serial) {
					t.Errorf("Current serial = %v, want %v", src.leaf().SerialNumber, next.serial)
				}
			}
		})
	}
}

func TestFileSourceKeepsTheLastGoodPairThroughABrokenRotation(t *testing.T) {
	tests := map[string]struct {
		// breakIt leaves the files in a state that cannot be served.
		breakIt func(t *testing.T, certFile, keyFile string, next testPair)
		want    string
	}{
		"a certificate rotated before its key is not served until the key follows": {
			breakIt: func(t *testing.T, certFile, _ string, next testPair) {
				writeFile(t, certFile, next.certPEM)
			},
			want: "does not match the public key",
		},
		"a key that does not parse keeps the old pair": {
			breakIt: func(t *testing.T, _, keyFile string, _ testPair) {
				writeFile(t, keyFile, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
			},
			want: "parse serving key",
		},
		"an emptied certificate file keeps the old pair": {
			breakIt: func(t *testing.T, certFile, _ string, _ testPair) {
				writeFile(t, certFile, nil)
			},
			want: "is empty",
		},
		"a deleted key file keeps the old pair": {
			breakIt: func(t *testing.T, _, keyFile string, _ testPair) {
				if err := os.Remove(keyFile); err != nil {
					t.Fatal(err)
				}
			},
			want: "no such file",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ca := newTestCA(t, "test CA")
			good, next := ca.serving(t), ca.serving(t)
			_, certFile, keyFile := writePairInTempDir(t, good)
			src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)), WithPollInterval(fastPoll))
			startSource(t, src)

			tc.breakIt(t, certFile, keyFile, next)
			// An in-place rewrite truncates before it writes, so the watcher
			// may first see an empty file; wait for the final state.
			waitFor(t, "Healthy to report the broken rotation", func() bool {
				err := src.Healthy()
				return err != nil && strings.Contains(err.Error(), tc.want)
			})
			err := src.Healthy()
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "still serving the previous certificate") {
				t.Errorf("Healthy = %q, want it to say %q and that the previous certificate is still served", err, tc.want)
			}
			if got := servedSerial(src); !sameSerial(got, good.serial) {
				t.Errorf("served serial during the broken rotation = %v, want the last good %v", got, good.serial)
			}
			if err := src.Ready(); err != nil {
				t.Errorf("Ready = %v: a broken rotation must not make the replica unready while the old pair serves", err)
			}
			if src.ReloadErrors() == 0 {
				t.Error("ReloadErrors = 0 during a broken rotation, want it counted for an alert")
			}
			if src.NotAfter().Before(time.Now()) {
				t.Errorf("NotAfter = %v, want the served certificate's expiry, in the future", src.NotAfter())
			}

			writeFile(t, certFile, next.certPEM)
			writeFile(t, keyFile, next.keyPEM)
			waitFor(t, "the fixed pair to be served", func() bool {
				return sameSerial(servedSerial(src), next.serial) && src.Healthy() == nil
			})
		})
	}
}

func TestFileSourceRecoversWhenTheGoodPairIsPutBack(t *testing.T) {
	ca := newTestCA(t, "test CA")
	good, other := ca.serving(t), ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, good)
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)), WithPollInterval(fastPoll))
	startSource(t, src)

	writeFile(t, keyFile, other.keyPEM)
	waitFor(t, "Healthy to report the mismatched key", func() bool { return src.Healthy() != nil })
	// Restoring the served bytes is not a new pair, but it is healthy again.
	writeFile(t, keyFile, good.keyPEM)
	waitFor(t, "Healthy to recover", func() bool { return src.Healthy() == nil })
	if got := servedSerial(src); !sameSerial(got, good.serial) {
		t.Errorf("served serial = %v, want %v", got, good.serial)
	}
}

func TestFileSourceHealthReportsTheValidityWindow(t *testing.T) {
	ca := newTestCA(t, "test CA")
	p := ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, p)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)), withClock(clk))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	leaf := src.leaf()

	tests := map[string]struct {
		now  time.Time
		want string // empty: healthy
	}{
		"inside the validity window it is healthy":       {now: leaf.NotBefore.Add(time.Minute)},
		"after NotAfter it says the certificate expired": {now: leaf.NotAfter.Add(time.Second), want: "expired at"},
		"before NotBefore it suspects the clock":         {now: leaf.NotBefore.Add(-time.Second), want: "is the clock right?"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk.SetTime(tc.now)
			err := src.Healthy()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Healthy = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Healthy = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestFileSourceStartsOnlyOnce(t *testing.T) {
	ca := newTestCA(t, "test CA")
	p := ca.serving(t)
	_, certFile, keyFile := writePairInTempDir(t, p)
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)))
	startSource(t, src)
	waitFor(t, "Start to run", src.started.Load)
	if err := src.Start(context.Background()); err == nil {
		t.Error("a second Start = nil, want an error")
	}
}

func TestFileSourceStartCanBeRetriedAfterTheFilesAreFixed(t *testing.T) {
	ca := newTestCA(t, "test CA")
	p := ca.serving(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName)
	src := NewFileSource(certFile, keyFile, WithLogger(testLogger(t)))
	if err := src.Start(context.Background()); err == nil {
		t.Fatal("Start with no files = nil, want an error")
	}
	writeFile(t, certFile, p.certPEM)
	writeFile(t, keyFile, p.keyPEM)
	startSource(t, src)
	if got := servedSerial(src); !sameSerial(got, p.serial) {
		t.Errorf("served serial = %v, want %v", got, p.serial)
	}
}
