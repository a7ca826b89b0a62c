package dirwatch_test

import (
	"context"
	"log/slog"

	"github.com/quantumnode/qn-admission/internal/dirwatch"
)

// The server takes the watcher before its first load, so nothing changed in
// between goes unseen, then reloads on every reported change.
func ExampleWatcher() {
	ctx := context.Background()
	dir := "/etc/qn-admission/policies" // a ConfigMap volume or a git-sync link
	w := dirwatch.New(dir, dirwatch.Options{Logger: slog.Default()})

	load := func(ctx context.Context) {
		revision := dirwatch.WorktreeCommit(dir)
		if revision == "" {
			revision, _ = dirwatch.Fingerprint(dir)
		}
		slog.InfoContext(ctx, "loading policies", "revision", revision)
		// compile off to the side, self-test, swap in atomically
	}
	load(ctx)
	go w.Run(ctx, load)
}
