package app

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies/window"
)

// buildWindows makes the rate window store: in this process, or in Redis
// so that every replica counts against one window. Either way it sits
// behind a window.Guard (deadline, metrics, and each role's onStoreError).
//
// An unreachable Redis does not stop qn-webhook from starting: until it
// answers, each role's onStoreError applies, and readiness shows it.
// Refusing to start would take every replica down with Redis and leave the
// apiserver's failurePolicy to decide for every role at once.
func (p *Program) buildWindows(ctx context.Context) error {
	o := p.Options
	opts := window.GuardOptions{Name: WindowStoreMemory, Timeout: o.WindowStoreTimeout, Metrics: window.NewStoreMetrics(p.Registry)}
	memory := window.NewMemoryStore(nil, window.MemoryOptions{})
	var store window.Store = memory
	if o.WindowStore == WindowStoreMemory {
		window.RegisterMemoryStore(p.Registry, WindowStoreMemory, memory)
	} else {
		// The local window of fail-open roles while the shared store fails.
		opts.Fallback = memory
		window.RegisterMemoryStore(p.Registry, "local", memory)
	}
	if o.WindowStore == WindowStoreRedis {
		// go-redis's own log lines (a refused dial per call while Redis is
		// down, each master a Sentinel names) go to debug: the Guard's
		// metrics and readiness report the store.
		redis.SetLogger(redisLog{p.Logger})
		cfg := o.RedisConfig()
		client, err := window.NewRedisClient(cfg)
		if err != nil {
			return fmt.Errorf("--window-store redis: %w", err)
		}
		p.closers = append(p.closers, func() { client.Close() })
		redisStore := window.NewRedisStore(client, window.RedisOptions{})
		loadCtx, cancel := context.WithTimeout(ctx, 4*o.WindowStoreTimeout)
		if err := redisStore.Load(loadCtx); err != nil {
			p.Logger.Warn("Redis does not answer yet; each role's window.onStoreError applies until it does", "redis", cfg.Mode(), "address", cfg.Endpoint(), "error", err)
		}
		cancel()
		store, opts.Name, opts.Address = redisStore, WindowStoreRedis, cfg.Endpoint()
	}
	p.Windows = window.NewGuard(store, opts)
	p.Logger.Info("rate windows", "store", opts.Name, "address", opts.Address, "timeout", o.WindowStoreTimeout.String())
	// Never unready because of the store, for the reason above; the
	// detail says how it is doing, and strict health whether the shared
	// store answers within its deadline.
	check := health.Check{Name: "windows", Detail: p.windowsStatus}
	if o.WindowStore == WindowStoreRedis {
		check.Strict = pingStore(store, opts.Name, opts.Address, o.WindowStoreTimeout)
	}
	p.Checks = append(p.Checks, check)
	return nil
}

// pingStore is a strict check: one read-only window call (the same script
// requests run) on a key of its own must answer within the deadline. It
// calls the store directly, not through the Guard, so a probe neither
// counts in the request metrics nor changes how requests are served.
func pingStore(store window.Store, name, address string, deadline time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		if _, err := store.Peek(ctx, "qn-health-ping", window.Limit{Count: 1, Period: time.Second}); err != nil {
			return fmt.Errorf("the %s window store at %s did not answer within its deadline %s (after %s): %w",
				name, address, deadline, time.Since(start).Round(time.Millisecond), err)
		}
		return nil
	}
}

// windowsStatus is the readiness detail of the window store: its health
// and latency, and what each role with a window does when it fails.
func (p *Program) windowsStatus() string {
	var b strings.Builder
	b.WriteString(p.Windows.Status().String())
	if p.Options.WindowStore == WindowStoreMemory {
		b.WriteString(" (this replica's windows only)")
	}
	if p.Engine == nil {
		return b.String()
	}
	roles := p.Engine.Current().Roles
	var modes []string
	for name, r := range roles.Roles {
		if r.Window != nil {
			modes = append(modes, name+" "+string(r.Window.OnStoreError))
		}
	}
	sort.Strings(modes)
	if len(modes) > 0 {
		fmt.Fprintf(&b, "; onStoreError: %s", strings.Join(modes, ", "))
	}
	return b.String()
}

// redisLog writes go-redis's log lines at debug level.
type redisLog struct{ logger *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}
