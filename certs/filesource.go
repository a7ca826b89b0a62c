package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/quantumnode/qn-admission/internal/filewatch"
)

// defaultPollInterval is how often a FileSource re-reads its files even when
// no filesystem event arrived. Events can be lost (inotify queue overflow, a
// watch that could not be added, a file behind a symlink into another
// directory); polling bounds how long a rotation can go unnoticed.
const defaultPollInterval = 10 * time.Second

// FileSource serves a certificate/key pair read from two files and swaps in
// a new pair when the files change, without a restart.
//
// It is written for Kubernetes Secret volumes, which the kubelet updates by
// writing a new timestamped directory and atomically renaming a "..data"
// symlink over the old one: the files themselves are never written, so
// FileSource watches the directories that hold them, not the files. Every
// event, and every poll tick, re-reads both files; a pair is only parsed when
// its bytes changed, and only published when it parses and the key matches
// the certificate. A half-written rotation therefore never replaces the pair
// being served; the next event or poll picks up the finished one.
type FileSource struct {
	certFile string
	keyFile  string
	interval time.Duration
	log      *slog.Logger
	clock    clock.PassiveClock

	// current is read by every TLS handshake, so it is an atomic pointer:
	// a handshake sees the old pair or the new one, never a mix.
	current atomic.Pointer[servingPair]

	// reloadMu serialises reloads (Load from a caller, events and polls from
	// Start) so two readers cannot publish out of order.
	reloadMu sync.Mutex

	// errMu guards lastErr, the outcome of the latest reload, which Healthy
	// reports.
	errMu   sync.Mutex
	lastErr error
	// reloadErrors counts failed reloads, for an alert.
	reloadErrors atomic.Uint64

	started atomic.Bool
}

// FileSourceOption changes how a FileSource watches and reports.
type FileSourceOption func(*FileSource)

// WithPollInterval sets how often the files are re-read regardless of
// filesystem events (defaultPollInterval when not set). Values <= 0 are
// ignored, because polling is the safety net for lost events.
func WithPollInterval(d time.Duration) FileSourceOption {
	return func(s *FileSource) {
		if d > 0 {
			s.interval = d
		}
	}
}

// WithLogger sets where rotations and failures are logged (slog.Default()
// when not set).
func WithLogger(l *slog.Logger) FileSourceOption {
	return func(s *FileSource) {
		if l != nil {
			s.log = l
		}
	}
}

// withClock sets the clock Healthy uses to judge whether the served
// certificate is inside its validity window, so tests can move time.
func withClock(c clock.PassiveClock) FileSourceOption {
	return func(s *FileSource) {
		if c != nil {
			s.clock = c
		}
	}
}

// NewFileSource returns a FileSource for the PEM certificate (chain) in
// certFile and the private key in keyFile. Nothing is read until Load or
// Start is called.
func NewFileSource(certFile, keyFile string, opts ...FileSourceOption) *FileSource {
	s := &FileSource{
		certFile: certFile,
		keyFile:  keyFile,
		interval: defaultPollInterval,
		log:      slog.Default(),
		clock:    clock.RealClock{},
	}
	for _, opt := range opts {
		opt(s)
	}
	s.log = s.log.With("certFile", certFile, "keyFile", keyFile)
	return s
}

// Load reads the pair once and serves it if it is new and valid. It returns
// the reason when the files cannot be served; a pair loaded before keeps
// being served. Start calls it; calling it before listening lets a server
// refuse to start on a bad pair instead of failing every handshake.
func (s *FileSource) Load() error {
	return s.reloadAndLog()
}

// Start loads the pair and then keeps it current until ctx ends, watching
// the files' directories and polling as a safety net. It returns an error at
// once if no pair could be loaded, and nil when ctx ends. Later failures do
// not stop it: they are logged and reported by Healthy, and the last good
// pair keeps being served. Start blocks, like a controller-runtime Runnable.
func (s *FileSource) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("certificate file source already started")
	}
	if err := s.Load(); err != nil && s.current.Load() == nil {
		// Nothing was started, so a caller that fixes the files may retry.
		s.started.Store(false)
		return err
	}

	dirs := s.watchDirs()
	s.log.Info("watching serving certificate", "dirs", dirs, "pollInterval", s.interval)
	return filewatch.Run(ctx, filewatch.Options{
		What: "serving certificate directory",
		Targets: func() filewatch.Targets {
			targets := filewatch.Targets{}
			for _, d := range dirs {
				targets[d] = nil
			}
			return targets
		},
		// Failures are logged by reloadAndLog when they start or change.
		Look:         func(context.Context) error { return s.reloadAndLog() },
		PollInterval: s.interval,
		Logger:       s.log,
	})
}

// GetCertificate returns the pair being served. It is meant for
// tls.Config.GetCertificate, which calls it on every handshake, so it only
// loads an atomic pointer.
func (s *FileSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p := s.current.Load()
	if p == nil {
		return nil, fmt.Errorf("no serving certificate loaded yet from %s", s.certFile)
	}
	return p.cert, nil
}

// leaf returns the parsed leaf certificate being served, or nil before
// the first successful load. Its NotAfter is what an expiry metric or log
// line should report. The caller must not modify it.
func (s *FileSource) leaf() *x509.Certificate {
	p := s.current.Load()
	if p == nil {
		return nil
	}
	return p.leaf
}

// Ready returns nil once a pair is being served. A rotated pair that cannot
// be served does not make the source unready: the previous pair still
// serves, and failing readiness would take every replica out of the
// Service at once over one bad Secret. Healthy, ReloadErrors and NotAfter
// say what is wrong, for a readiness detail, a log and an alert.
func (s *FileSource) Ready() error {
	if s.current.Load() == nil {
		return s.Healthy()
	}
	return nil
}

// ReloadErrors counts the reloads that failed since the start: a read or
// parse error each time the broken files are looked at.
func (s *FileSource) ReloadErrors() uint64 { return s.reloadErrors.Load() }

// NotAfter is when the served certificate expires; zero before a load.
func (s *FileSource) NotAfter() time.Time {
	if leaf := s.leaf(); leaf != nil {
		return leaf.NotAfter
	}
	return time.Time{}
}

// Healthy returns nil when a valid pair is being served and the files on
// disk are that pair. Otherwise it says what is wrong: nothing loaded yet,
// a rotated pair that cannot be served (while the previous one still is), or
// a served certificate outside its validity window. It is meant for a
// readiness check and its detail.
func (s *FileSource) Healthy() error {
	p := s.current.Load()
	s.errMu.Lock()
	lastErr := s.lastErr
	s.errMu.Unlock()

	if p == nil {
		if lastErr != nil {
			return fmt.Errorf("no serving certificate loaded: %w", lastErr)
		}
		return fmt.Errorf("no serving certificate loaded yet from %s", s.certFile)
	}
	if lastErr != nil {
		return fmt.Errorf("still serving the previous certificate (serial %s, expires %s) because the files on disk cannot be served: %w",
			p.leaf.SerialNumber.Text(16), p.leaf.NotAfter.UTC().Format(time.RFC3339), lastErr)
	}
	now := s.clock.Now()
	if now.After(p.leaf.NotAfter) {
		return fmt.Errorf("serving certificate %s (serial %s) expired at %s; is cert-manager renewing it?",
			s.certFile, p.leaf.SerialNumber.Text(16), p.leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(p.leaf.NotBefore) {
		return fmt.Errorf("serving certificate %s (serial %s) is not valid before %s; is the clock right?",
			s.certFile, p.leaf.SerialNumber.Text(16), p.leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// reload reads both files and publishes them if they differ from the pair
// being served and can be served. It reports whether a new pair was
// published, and the outcome of the reload before this one.
func (s *FileSource) reload() (changed bool, prevErr, err error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()

	changed, err = s.readAndSwap()
	if err != nil {
		s.reloadErrors.Add(1)
	}
	s.errMu.Lock()
	prevErr, s.lastErr = s.lastErr, err
	s.errMu.Unlock()
	return changed, prevErr, err
}

func (s *FileSource) readAndSwap() (bool, error) {
	certPEM, err := os.ReadFile(s.certFile)
	if err != nil {
		return false, fmt.Errorf("read serving certificate %s: %w", s.certFile, err)
	}
	keyPEM, err := os.ReadFile(s.keyFile)
	if err != nil {
		return false, fmt.Errorf("read serving key %s: %w", s.keyFile, err)
	}
	cur := s.current.Load()
	if cur != nil && bytes.Equal(cur.certPEM, certPEM) && bytes.Equal(cur.keyPEM, keyPEM) {
		return false, nil
	}
	next, err := parsePair(s.certFile, certPEM, s.keyFile, keyPEM)
	if err != nil {
		return false, err
	}
	s.current.Store(next)
	return true, nil
}

// reloadAndLog reloads and logs what changed. Failures are logged when they
// start or change, not on every poll, so a broken Secret does not flood the
// log while Healthy keeps reporting it.
func (s *FileSource) reloadAndLog() error {
	changed, before, err := s.reload()
	switch {
	case err != nil:
		if before == nil || before.Error() != err.Error() {
			s.log.Error("cannot load rotated serving certificate; still serving the previous one", "err", err)
		}
	case changed:
		leaf := s.leaf()
		s.log.Info("serving certificate loaded",
			"serial", leaf.SerialNumber.Text(16),
			"dnsNames", leaf.DNSNames,
			"notAfter", leaf.NotAfter.UTC().Format(time.RFC3339))
	case before != nil:
		s.log.Info("serving certificate files are valid again")
	}
	return err
}

// watchDirs returns the directories to watch: those holding the two paths
// as given, not their symlink targets, because a Secret volume replaces the
// "..data" symlink in that directory on every update.
func (s *FileSource) watchDirs() []string {
	dirs := []string{filepath.Dir(s.certFile)}
	if d := filepath.Dir(s.keyFile); d != dirs[0] {
		dirs = append(dirs, d)
	}
	return dirs
}
