package nodecluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(RunInSandbox(m, Hooks{})) }

// The images the cluster runs are written here, not pulled: containerd
// must import them by name and run them with runc, the pause image and
// an image of Debian binaries (the Redis the chart runs) alike.
func TestBuiltImagesImportAndRunUnderContainerd(t *testing.T) {
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := &Cluster{Dir: dir, opts: Options{Log: t.Logf}, ctrSocket: filepath.Join(os.Getenv(dirEnv), "t.sock")}
	defer c.Stop()
	if err := c.startContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.importPause(ctx); err != nil {
		t.Fatal(err)
	}
	files, err := HostFiles("/usr/bin/redis-server", "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "redis.tar")
	if err := WriteImage(ImageSpec{Ref: "qn.local/redis:unit", Files: files, Env: []string{"PATH=/usr/bin:/bin"}}, archive); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	list, err := c.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{PauseImage, "qn.local/redis:unit"} {
		if !strings.Contains(list, ref) {
			t.Errorf("containerd does not list %s:\n%s", ref, list)
		}
	}
	// The shell and redis-server run from the image's own files.
	out, err := c.ctr(ctx, "run", "--rm", "--net-host", "qn.local/redis:unit", "unit-redis", "sh", "-c", "redis-server --version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Redis server v=") {
		t.Errorf("redis-server --version in the image printed %q", out)
	}
}
