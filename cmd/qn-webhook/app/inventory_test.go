package app

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/harness"
)

// An inventory that cannot sync (here: no API server answers) never
// locks writes out: the webhook starts, is not Ready until
// --inventory-sync-timeout, then is, and the role that reads the
// inventory answers by its onError (deny: 500, saying why).
func TestAnInventoryThatCannotSyncDoesNotLockOut(t *testing.T) {
	dir := t.TempDir()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://`+addr+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	policyDir := filepath.Join(dir, "policies")
	if err := os.CopyFS(policyDir, os.DirFS(filepath.Join("..", "..", "..", "docs", "examples", "inventory"))); err != nil {
		t.Fatal(err)
	}
	s := start(t, dir, "--policy-dir="+policyDir, "--inventory", "--kubeconfig="+kubeconfig, "--inventory-sync-timeout=2s")
	code, body := s.probe(t, "/readyz?verbose")
	if code == 200 || !strings.Contains(body, "inventory") {
		t.Errorf("/readyz before the sync timeout = %d %q, want not ready, naming the inventory", code, body)
	}
	harness.WaitFor(t, 10*time.Second, "ready after the sync timeout: an inventory that cannot sync must not keep the webhook out of its Service", func() error {
		if code, body := s.probe(t, "/readyz?verbose"); code != 200 {
			return fmt.Errorf("/readyz = %d %q", code, body)
		}
		return nil
	})
	got := s.admit(t, "/validate", review("uid-inv", `{"nodeName":"worker-1","hardware":{"arch":"arm64"},"services":[{"name":"mqtt","port":8883}]}`))
	if got.Allowed || got.Result.Code != 500 || !strings.Contains(got.Result.Message, "cluster inventory (data.inventory), which cannot be used now") {
		t.Errorf("a role that reads an unsynced inventory: allowed=%v %+v, want its onError (deny: 500) saying why", got.Allowed, got.Result)
	}
	if strict, body := s.probe(t, "/healthz?strict=true"); strict == 200 || !strings.Contains(body, "inventory") {
		t.Errorf("strict health = %d %q, want it failing on the inventory: a person is paged", strict, body)
	}
}
