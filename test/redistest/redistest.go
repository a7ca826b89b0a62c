// Package redistest runs a real redis-server for one test: on a free
// loopback port, its files in the test's temporary directory, stopped when
// the test ends. Tests of the shared rate windows use it instead of a fake,
// so the Lua scripts, timeouts and reconnects are the real ones.
package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quantumnode/qn-admission/test/harness"

	"github.com/quantumnode/qn-admission/certs"
)

// Server is one redis-server process under a test's control.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	// Addr is the server's 127.0.0.1:port; it keeps it across Restart.
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	// tls is set for a server that only speaks TLS.
	tls *tls.Config
}

// Binary finds redis-server on PATH. Without it, the test is skipped with a
// loud message, except in CI (CI=true), where a missing server is a
// failure: .ci/run installs it.
func Binary(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-server")
}

// lookPath finds the named program of Debian's package of the same name,
// skipping the test without it (failing it in CI).
func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	msg := name + " is not on PATH, so the shared rate window tests cannot run: " +
		"install it (Debian: apt-get install -y " + name + "; .ci/run does this)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED, NOT PASSED: " + msg)
	return ""
}

// Start runs a new redis-server with persistence off, plus extra
// configuration arguments (e.g. "--requirepass", "secret"). A password
// set there must be in the client's options too: Start waits for PING.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, &Server{t: t, bin: Binary(t), dir: t.TempDir(), args: extra})
}

// StartTLS runs a redis-server that accepts only TLS, serving a
// self-signed certificate for 127.0.0.1 and localhost; clients need no
// certificate of their own. It returns the server and the CA file that
// verifies it.
func StartTLS(t testing.TB, extra ...string) (*Server, string) {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir()}
	b, err := certs.SelfSigned(certs.SelfSignedOptions{Dir: filepath.Join(s.dir, "tls"), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CAPEM)
	s.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	s.args = append([]string{"--tls-cert-file", b.CertFile, "--tls-key-file", b.KeyFile, "--tls-ca-cert-file", b.CAFile, "--tls-auth-clients", "no"}, extra...)
	return start(t, s), b.CAFile
}

func start(t testing.TB, s *Server) *Server {
	t.Helper()
	var err error
	// A port found free can be taken before redis-server binds it; try a
	// few.
	for range 5 {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { s.Kill() })
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	listen := []string{"--port", port}
	if s.tls != nil {
		listen = []string{"--port", "0", "--tls-port", port}
	}
	args := append(append(listen,
		"--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	), s.args...)
	s.cmd = exec.Command(s.bin, args...)
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(s.cmd, s.exited)
	if err := awaitPing("redis-server", s.Addr, s.tls, s.exited, filepath.Join(s.dir, "redis.log")); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// awaitPing waits up to 15s for the process serving addr to answer PING
// (or to ask for a password), and reports its log if it exits first.
func awaitPing(what, addr string, tc *tls.Config, exited <-chan struct{}, logFile string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: tc})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		var answered redis.Error // e.g. NOAUTH: up, and wants a password
		if err == nil || errors.As(err, &answered) {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile)
			return fmt.Errorf("%s on %s exited: %s", what, addr, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s did not answer PING within 15s: %v", what, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID is the server process's id (its CPU time is in /proc/<pid>/stat), or
// 0 when it is not running.
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// CPU is the user and system CPU time redis-server has used: benchmarks
// count it in what a shared window costs. It fails the test when the
// server is not running.
func (s *Server) CPU() time.Duration {
	s.t.Helper()
	st, err := harness.ReadProc(s.PID())
	if err != nil {
		s.t.Fatalf("read redis-server's CPU time: %v", err)
	}
	return st.CPU
}

// Client is a plain client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.tls})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Kill ends the server at once (SIGKILL), as a crash or an evicted pod
// would; with persistence off, its windows are gone. It is a no-op when the
// server is not running.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same address after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("redistest: Restart of a server that is running; Kill it first")
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Pause stops the process (SIGSTOP): connections are still accepted by the
// kernel but nothing answers, as with a server stuck in a long command or
// a network that drops packets.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// FillToMaxmemory writes junk keys (junk:<n>, no expiry) until the server,
// started with --maxmemory and --maxmemory-policy noeviction, refuses even
// a one-byte write for want of memory: a user's Redis that is full. A
// large write can be refused for its own size while a small one still
// passes, so the last writes are small. Then it lowers maxmemory to half
// of it: at the limit itself, a client closing its connection frees enough
// for writes to pass again, and the test would depend on when one does.
func (s *Server) FillToMaxmemory() {
	s.t.Helper()
	c := s.Client()
	ctx := context.Background()
	value := string(make([]byte, 1000))
	for i := 0; ; i++ {
		err := c.Set(ctx, fmt.Sprintf("junk:%d", i), value, 0).Err()
		switch {
		case err == nil:
		case !isOOM(err):
			s.t.Fatalf("fill redis-server to its maxmemory: %v", err)
		case len(value) == 1:
			limit, err := c.ConfigGet(ctx, "maxmemory").Result()
			if err != nil {
				s.t.Fatal(err)
			}
			n, err := strconv.ParseInt(limit["maxmemory"], 10, 64)
			if err != nil || n == 0 {
				s.t.Fatalf("redis-server has no maxmemory (%q, %v): start it with --maxmemory", limit["maxmemory"], err)
			}
			if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(n/2, 10)).Err(); err != nil {
				s.t.Fatal(err)
			}
			return
		default:
			value = "x"
		}
	}
}

func isOOM(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && len(re.Error()) > 4 && re.Error()[:4] == "OOM "
}
