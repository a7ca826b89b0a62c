package window

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/redistest"
)

func TestRedisClientConfigMistakesAreClearErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		cfg  RedisConfig
		want string
	}{
		"no address":                  {cfg: RedisConfig{}, want: "no address; set --redis-address host:port"},
		"a password file missing":     {cfg: RedisConfig{Address: "127.0.0.1:1", PasswordFile: filepath.Join(dir, "nope")}, want: "redis password file: open " + filepath.Join(dir, "nope")},
		"a CA file without TLS":       {cfg: RedisConfig{Address: "127.0.0.1:1", TLSCAFile: notPEM}, want: "TLS is off; add --redis-tls"},
		"a CA file missing":           {cfg: RedisConfig{Address: "127.0.0.1:1", TLS: true, TLSCAFile: filepath.Join(dir, "nope")}, want: "redis TLS CA: open"},
		"a CA file with no PEM in it": {cfg: RedisConfig{Address: "127.0.0.1:1", TLS: true, TLSCAFile: notPEM}, want: "no PEM certificate in it"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := NewRedisClient(tc.cfg)
			if err == nil {
				c.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRedisClient(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestRedisPasswordFileIsReadOnEveryNewConnection(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "first")
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "AUTH", "first").Err(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "password")
	write := func(p string) {
		if err := os.WriteFile(file, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first\n") // a trailing newline, as echo leaves it
	c, err := NewRedisClient(RedisConfig{Address: srv.Addr, PasswordFile: file, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewRedisStore(c, RedisOptions{})
	l := Limit{Count: 5, Period: time.Minute}
	if tk, err := s.Take(ctx, "rt/user/alice", l, "u1"); err != nil || !tk.Admitted {
		t.Fatalf("Take with the password from the file: %v %v", tk.Admitted, err)
	}

	// The Secret rotates: Redis takes the new password, the file follows,
	// and connections made from then on use it.
	if err := admin.ConfigSet(ctx, "requirepass", "second").Err(); err != nil {
		t.Fatal(err)
	}
	write("second")
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	var okAfter bool
	for range 3 { // the first call may find its pooled connection closed
		if tk, err := s.Take(ctx, "rt/user/alice", l, "u2"); err == nil && tk.Admitted {
			okAfter = true
			break
		}
	}
	if !okAfter {
		t.Fatal("no Take succeeded after the password rotated")
	}

	write("wrong")
	c2, err := NewRedisClient(RedisConfig{Address: srv.Addr, PasswordFile: file, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = NewRedisStore(c2, RedisOptions{}).Take(ctx, "rt/user/alice", l, "u3")
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Take with a wrong password: %v, want Redis's WRONGPASS", err)
	}
}

func TestRedisOverTLS(t *testing.T) {
	srv, caFile := redistest.StartTLS(t)
	ctx := context.Background()
	l := Limit{Count: 5, Period: time.Minute}

	c, err := NewRedisClient(RedisConfig{Address: srv.Addr, TLS: true, TLSCAFile: caFile, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tk, err := NewRedisStore(c, RedisOptions{}).Take(ctx, "rt/user/alice", l, "u1"); err != nil || !tk.Admitted {
		t.Fatalf("Take over TLS: %v %v", tk.Admitted, err)
	}

	// Without the CA, the self-signed server is not trusted.
	untrusting, err := NewRedisClient(RedisConfig{Address: srv.Addr, TLS: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close()
	if _, err := NewRedisStore(untrusting, RedisOptions{}).Take(ctx, "rt/user/alice", l, "u2"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Take over TLS without the CA: %v, want a certificate error", err)
	}
	// Plain text to a TLS port gets no answer, not a count.
	plain, err := NewRedisClient(RedisConfig{Address: srv.Addr, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := NewRedisStore(plain, RedisOptions{}).Take(ctx, "rt/user/alice", l, "u3"); err == nil {
		t.Fatal("a plain-text Take to a TLS-only Redis succeeded")
	}
}
