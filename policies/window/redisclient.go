package window

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ways qn-webhook reaches Redis (RedisConfig.Mode).
const (
	RedisSingle   = "single"
	RedisSentinel = "sentinel"
	RedisCluster  = "cluster"
)

// RedisConfig is how qn-webhook reaches Redis: flags and chart values map
// onto it one to one. Exactly one of Address, SentinelAddresses (with
// SentinelMaster) and ClusterAddresses is set.
type RedisConfig struct {
	// Address is host:port of a single Redis (or of a proxy in front of
	// a replicated one).
	Address string
	// SentinelAddresses are host:port of Redis Sentinels that watch the
	// master named SentinelMaster: the client asks them where the master
	// is, and follows it when they promote a replica.
	SentinelAddresses []string
	SentinelMaster    string
	// SentinelPasswordFile holds the Sentinels' own password, when they
	// have one (requirepass in sentinel.conf). It is read at start.
	SentinelPasswordFile string
	// ClusterAddresses are host:port of some nodes of a Redis Cluster;
	// the client learns the others and which shard holds each key.
	ClusterAddresses []string
	// PasswordFile, when set, holds the password of the Redis servers (a
	// mounted Secret). It is read again whenever a connection is made, so
	// a rotated Secret needs no restart.
	PasswordFile string
	// TLS connects with TLS 1.2 or later, verifying the server against
	// TLSCAFile or else the system roots (Sentinels and cluster nodes
	// too; each is verified under the host it is dialed at).
	TLS       bool
	TLSCAFile string
	// Timeout bounds dialing, so a Redis that does not accept connections
	// costs a request no more than its window deadline.
	Timeout time.Duration
}

// Mode is RedisSingle, RedisSentinel or RedisCluster.
func (c RedisConfig) Mode() string {
	switch {
	case len(c.SentinelAddresses) > 0:
		return RedisSentinel
	case len(c.ClusterAddresses) > 0:
		return RedisCluster
	default:
		return RedisSingle
	}
}

// Endpoint says where Redis is, for logs and readiness; never a password.
func (c RedisConfig) Endpoint() string {
	switch c.Mode() {
	case RedisSentinel:
		return fmt.Sprintf("master %q via sentinels %s", c.SentinelMaster, strings.Join(c.SentinelAddresses, ","))
	case RedisCluster:
		return "cluster via " + strings.Join(c.ClusterAddresses, ",")
	default:
		return c.Address
	}
}

// Validate says what is wrong with c, naming the flag to fix.
func (c RedisConfig) Validate() error {
	set := 0
	for _, on := range []bool{c.Address != "", len(c.SentinelAddresses) > 0, len(c.ClusterAddresses) > 0} {
		if on {
			set++
		}
	}
	switch {
	case set == 0:
		return fmt.Errorf("redis: no address; set --redis-address host:port, --redis-sentinel-addresses with --redis-sentinel-master, or --redis-cluster-addresses")
	case set > 1:
		return fmt.Errorf("redis: set one of --redis-address (%q), --redis-sentinel-addresses (%q) and --redis-cluster-addresses (%q), not several",
			c.Address, strings.Join(c.SentinelAddresses, ","), strings.Join(c.ClusterAddresses, ","))
	case (len(c.SentinelAddresses) > 0) != (c.SentinelMaster != ""):
		return fmt.Errorf("redis: --redis-sentinel-addresses and --redis-sentinel-master go together (got addresses %q, master %q)",
			strings.Join(c.SentinelAddresses, ","), c.SentinelMaster)
	case c.SentinelPasswordFile != "" && len(c.SentinelAddresses) == 0:
		return fmt.Errorf("redis: --redis-sentinel-password-file is set without --redis-sentinel-addresses")
	case c.TLSCAFile != "" && !c.TLS:
		return fmt.Errorf("redis: a TLS CA file (%s) is set but TLS is off; add --redis-tls", c.TLSCAFile)
	}
	check := func(flag string, addrs ...string) error {
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("redis: %s %q is not host:port: %v", flag, a, err)
			}
		}
		return nil
	}
	if c.Address != "" {
		return check("--redis-address", c.Address)
	}
	if err := check("--redis-sentinel-addresses", c.SentinelAddresses...); err != nil {
		return err
	}
	return check("--redis-cluster-addresses", c.ClusterAddresses...)
}

// NewRedisClient builds a client for cfg: a plain client, a Sentinel
// (failover) client or a cluster client, configured alike. Every call
// honours its context's deadline (go-redis ignores it by default and waits
// for its own 3 s read timeout), so the Guard's deadline is the longest a
// request waits, during a failover too.
func NewRedisClient(cfg RedisConfig) (redis.UniversalClient, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	var credentials func() (string, string)
	if cfg.PasswordFile != "" {
		if _, err := readPassword(cfg.PasswordFile); err != nil {
			return nil, err
		}
		var mu sync.Mutex
		last := ""
		credentials = func() (string, string) {
			mu.Lock()
			defer mu.Unlock()
			if p, err := readPassword(cfg.PasswordFile); err == nil {
				last = p
			}
			return "", last
		}
	}
	var tc *tls.Config
	if cfg.TLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if host, _, err := net.SplitHostPort(cfg.Address); err == nil {
			tc.ServerName = host
		}
		if cfg.TLSCAFile != "" {
			pem, err := os.ReadFile(cfg.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("redis TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis TLS CA %s: no PEM certificate in it", cfg.TLSCAFile)
			}
			tc.RootCAs = pool
		}
	}
	// The settings every mode shares.
	const (
		// A retry is safe (a retried uid takes no second slot) and stays
		// inside the caller's deadline.
		maxRetries      = 2
		minRetryBackoff = time.Millisecond
		maxRetryBackoff = 10 * time.Millisecond
		// One dial per attempt: a refused connection fails the call at
		// once (the Guard then answers every request at once until its
		// next probe), rather than after retries that outlast the
		// deadline; go-redis waits dialRetryWait after a failed dial even
		// when it will not try again.
		dialRetries   = 1
		dialRetryWait = time.Millisecond
		// Connections kept open, so a burst after a quiet spell does not
		// dial (and handshake) under the request's deadline.
		minIdleConns = 2
	)
	opts := &redis.UniversalOptions{
		Addrs:               []string{cfg.Address},
		CredentialsProvider: credentials, TLSConfig: tc,
		ContextTimeoutEnabled: true, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
		MaxRetries: maxRetries, MinRetryBackoff: minRetryBackoff, MaxRetryBackoff: maxRetryBackoff,
		MinIdleConns: minIdleConns, DisableIdentity: true,
	}
	switch cfg.Mode() {
	case RedisSentinel:
		opts.Addrs, opts.MasterName = cfg.SentinelAddresses, cfg.SentinelMaster
		if cfg.SentinelPasswordFile != "" {
			p, err := readPassword(cfg.SentinelPasswordFile)
			if err != nil {
				return nil, err
			}
			opts.SentinelPassword = p
		}
		o := opts.Failover()
		o.DialerRetries, o.DialerRetryTimeout = dialRetries, dialRetryWait
		return redis.NewFailoverClient(o), nil
	case RedisCluster:
		opts.Addrs = cfg.ClusterAddresses
		o := opts.Cluster()
		o.DialerRetries, o.DialerRetryTimeout = dialRetries, dialRetryWait
		return redis.NewClusterClient(o), nil
	default:
		o := opts.Simple()
		o.DialerRetries, o.DialerRetryTimeout = dialRetries, dialRetryWait
		return redis.NewClient(o), nil
	}
}

func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("redis password file: %w", err)
	}
	// A Secret written by hand often ends in a newline the password lacks.
	return strings.TrimRight(string(b), "\r\n"), nil
}
