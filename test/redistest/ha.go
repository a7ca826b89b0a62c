package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels of StartReplicated watch the master
// under.
const MasterName = "qn-windows"

// SentinelDownAfter is how long the Sentinels of StartReplicated wait for
// a silent master before they call it down (down-after-milliseconds): a
// failover takes this plus the Sentinels' vote and the promotion.
const SentinelDownAfter = 500 * time.Millisecond

// Replicated is Redis as a Sentinel installation runs it: a master, a
// replica copying it (asynchronously), and three Sentinels (quorum 2) that
// promote the replica when the master stops answering.
type Replicated struct {
	t               testing.TB
	Master, Replica *Server
	Sentinels       []*Sentinel
}

// Sentinel is one redis-sentinel process.
type Sentinel struct {
	// Addr is the Sentinel's 127.0.0.1:port.
	Addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartReplicated starts a master, its replica and three Sentinels, and
// returns once the replica is in sync and every Sentinel knows the replica
// and the two other Sentinels, so that a failover can happen. It needs
// redis-sentinel (Debian's package of that name) besides redis-server.
func StartReplicated(t testing.TB) *Replicated {
	t.Helper()
	sentinelBin := lookPath(t, "redis-sentinel")
	master := Start(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := Start(t, "--replicaof", host, port)
	r := &Replicated{t: t, Master: master, Replica: replica}
	replicaClient := replica.Client()
	waitFor(t, 15*time.Second, "the replica to sync with its master", func(ctx context.Context) (bool, error) {
		info, err := replicaClient.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up"), err
	})
	for range 3 {
		r.Sentinels = append(r.Sentinels, startSentinel(t, sentinelBin, master.Addr))
	}
	for _, s := range r.Sentinels {
		c := s.client()
		waitFor(t, 20*time.Second, "Sentinel "+s.Addr+" to know the replica and the other Sentinels", func(ctx context.Context) (bool, error) {
			replicas, err := c.Do(ctx, "SENTINEL", "REPLICAS", MasterName).Slice()
			if err != nil {
				return false, err
			}
			others, err := c.Do(ctx, "SENTINEL", "SENTINELS", MasterName).Slice()
			return len(replicas) == 1 && len(others) == 2, err
		})
		c.Close()
	}
	return r
}

// SentinelAddrs are the Sentinels' addresses.
func (r *Replicated) SentinelAddrs() []string {
	addrs := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// WaitForMaster waits until every Sentinel names addr as the master, and
// fails the test after timeout.
func (r *Replicated) WaitForMaster(addr string, timeout time.Duration) {
	r.t.Helper()
	for _, s := range r.Sentinels {
		c := s.client()
		waitFor(r.t, timeout, "Sentinel "+s.Addr+" to name "+addr+" the master", func(ctx context.Context) (bool, error) {
			got, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
			return err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == addr, err
		})
		c.Close()
	}
}

func (s *Sentinel) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
}

func startSentinel(t testing.TB, bin, masterAddr string) *Sentinel {
	t.Helper()
	host, port, _ := net.SplitHostPort(masterAddr)
	s := &Sentinel{dir: t.TempDir()}
	var err error
	for range 5 { // a port found free can be taken before the Sentinel binds it
		var p int
		if p, err = freePort(); err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		// A Sentinel rewrites its configuration file as it learns, so it
		// must be a file of its own.
		conf := filepath.Join(s.dir, "sentinel.conf")
		log := filepath.Join(s.dir, "sentinel.log")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s 2\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 5000\n",
			p, s.dir, log, MasterName, host, port, MasterName, SentinelDownAfter.Milliseconds(), MasterName)
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s.cmd = exec.Command(bin, conf)
		s.exited = make(chan struct{})
		if err = s.cmd.Start(); err != nil {
			continue
		}
		go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(s.cmd, s.exited)
		if err = awaitPing("redis-sentinel", s.Addr, nil, s.exited, log); err == nil {
			break
		}
		s.kill()
	}
	if err != nil {
		t.Fatalf("start redis-sentinel: %v", err)
	}
	t.Cleanup(s.kill)
	return s
}

func (s *Sentinel) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// waitFor polls ok every 50ms until it answers true, failing the test
// after timeout with the last error.
func waitFor(t testing.TB, timeout time.Duration, what string, ok func(context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done, err := ok(ctx)
		cancel()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waited %s for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartCluster starts a Redis Cluster of n masters (no replicas), the
// 16,384 hash slots split evenly among them, and returns once every node
// reports the cluster ok. Clients given any one node's address learn the
// others.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	for i := range nodes {
		nodes[i] = Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	}
	ctx := context.Background()
	const slots = 16384
	for i, s := range nodes {
		c := s.Client()
		if err := c.ClusterAddSlotsRange(ctx, i*slots/n, (i+1)*slots/n-1).Err(); err != nil {
			t.Fatalf("redistest: give node %s its slots: %v", s.Addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(nodes[0].Addr)
			if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
				t.Fatalf("redistest: node %s meets %s: %v", s.Addr, nodes[0].Addr, err)
			}
		}
	}
	for _, s := range nodes {
		c := s.Client()
		waitFor(t, 20*time.Second, "node "+s.Addr+" to report the cluster ok", func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)), err
		})
	}
	return nodes
}
