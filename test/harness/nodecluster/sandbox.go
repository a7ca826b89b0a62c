package nodecluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary runs its cluster inside namespaces of its own: a PID
// namespace (when its first process, the test binary, exits, the kernel
// kills every process of the cluster, containers included, whatever
// failed), a network namespace (the bridge, the pod network, kube-proxy's
// nftables tables and the conntrack table exist only there and vanish with
// it; every address the cluster uses is in it) and a mount namespace (the
// tmpfs over /run and /var/log, containerd's overlay mounts, the kubelet's
// volume mounts vanish with it). What no namespace holds, the process
// outside puts back once the one inside has exited: the kernel settings
// the kubelet changes and the cgroups it made.
const (
	sandboxEnv = "QN_NODE_SANDBOX"
	// unavailableEnv carries, into the tests, why no cluster can start here
	// (they skip with it, or fail under CI=true).
	unavailableEnv = "QN_NODE_UNAVAILABLE"
	// cgroupRootEnv names the cgroup (under every hierarchy) the outer
	// process made for the kubelet's pods and removes afterwards.
	cgroupRootEnv = "QN_NODE_CGROUP_ROOT"
	// dirEnv is the directory the outer process made for the cluster's
	// files and removes afterwards.
	dirEnv = "QN_NODE_DIR"
)

// kernelSettings are the sysctls outside any namespace that the kubelet
// sets when it starts (its protectKernelDefaults list), put back after.
var kernelSettings = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// HostTools are the programs a node needs from the host (Debian packages,
// installed by .ci/run).
var HostTools = []string{"unshare", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "ip", "ldd", "redis-server", "sh"}

// CNIPluginDir holds the CNI plugins (Debian's containernetworking-plugins).
const CNIPluginDir = "/usr/lib/cni"

// Hooks are a test package's steps around its sandbox.
type Hooks struct {
	// Prepare runs outside the namespaces first, where the network is
	// (the sandbox has no way out): e.g. a build that may download
	// modules. dir is the cluster's directory (SharedDir inside), removed
	// at the end.
	Prepare func(dir string) error
	// After runs inside once the tests are done: stop the cluster.
	After func()
}

// RunInSandbox is a TestMain for a package whose tests run a cluster: it
// runs the tests again inside fresh PID, network and mount namespaces
// (hooks.Prepare first, outside; hooks.After inside once they are done),
// and afterwards puts back what those do not hold. When a node cannot run on
// this machine (not root, a tool missing), the tests run where they are
// and Require skips them, or fails them under CI=true.
func RunInSandbox(m *testing.M, hooks Hooks) int {
	if os.Getenv(sandboxEnv) == "1" {
		if err := setUpInside(); err != nil {
			fmt.Fprintf(os.Stderr, "nodecluster: set up the sandbox: %v\n", err)
			return 1
		}
		code := m.Run()
		if hooks.After != nil {
			hooks.After()
		}
		return code
	}
	if why := unavailable(); why != "" {
		os.Setenv(unavailableEnv, why)
		return m.Run()
	}

	saved := readKernelSettings()
	cgroupRoot := fmt.Sprintf("qn-node-%d", os.Getpid())
	made, err := makeCgroupRoot(cgroupRoot)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		removeCgroups(made)
		return 1
	}
	// A short path: containerd's socket lives in it (108 bytes at most).
	dir, err := os.MkdirTemp("", "qn-node-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		removeCgroups(made)
		return 1
	}
	defer os.RemoveAll(dir)
	if hooks.Prepare != nil {
		if err := hooks.Prepare(dir); err != nil {
			fmt.Fprintf(os.Stderr, "nodecluster: prepare, outside the namespaces: %v\n", err)
			removeCgroups(made)
			return 1
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", "--mount-proc",
		"--net", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), sandboxEnv+"=1", cgroupRootEnv+"=/"+cgroupRoot, dirEnv+"="+dir)
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintf(os.Stderr, "nodecluster: run the tests in their namespaces: %v\n", err)
			code = 1
		} else if code = exit.ExitCode(); code < 0 {
			code = 1
		}
	}
	if err := restoreKernelSettings(saved); err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		code = 1
	}
	if err := removeCgroups(made); err != nil {
		fmt.Fprintf(os.Stderr, "nodecluster: %v\n", err)
		code = 1
	}
	return code
}

// Require skips t (fails it under CI=true) when no node can run here.
func Require(t testing.TB) {
	t.Helper()
	why := os.Getenv(unavailableEnv)
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("a one-node cluster cannot run here: %s", why)
	}
	t.Skipf("SKIPPED, NOT PASSED: a one-node cluster cannot run here: %s", why)
}

// SharedDir is the directory Prepare was given, seen from inside.
func SharedDir() string { return os.Getenv(dirEnv) }

// Inside reports whether this process runs in the cluster's namespaces.
func Inside() bool { return os.Getenv(sandboxEnv) == "1" }

func unavailable() string {
	if os.Geteuid() != 0 {
		return "containerd and the kubelet need root"
	}
	var missing []string
	for _, tool := range HostTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIPluginDir, plugin)); err != nil {
			missing = append(missing, CNIPluginDir+"/"+plugin)
		}
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ") + " (.ci/run installs containerd, runc, containernetworking-plugins, nftables, iproute2 and redis-server)"
	}
	if err := exec.Command("unshare", "--pid", "--fork", "--net", "--mount", "true").Run(); err != nil {
		return "cannot make PID, network and mount namespaces: " + err.Error()
	}
	return ""
}

// setUpInside prepares the fresh namespaces: loopback up, forwarding on
// (the pod network is routed through this namespace), and tmpfs over
// the host paths containerd, runc, CNI and the kubelet write to without
// asking (/run, /var/log, /var/lib/cni), so nothing of theirs reaches the
// host's files.
func setUpInside() error {
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"mount", "-t", "tmpfs", "-o", "mode=755", "qn-node-run", "/run"},
		{"mount", "-t", "tmpfs", "-o", "mode=755", "qn-node-log", "/var/log"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

func readKernelSettings() map[string]string {
	saved := map[string]string{}
	for _, k := range kernelSettings {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			saved[k] = strings.TrimSpace(string(b))
		}
	}
	return saved
}

func restoreKernelSettings(saved map[string]string) error {
	var errs []error
	for k, v := range saved {
		now, err := os.ReadFile("/proc/sys/" + k)
		if err == nil && strings.TrimSpace(string(now)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("put back %s=%s: %w", strings.ReplaceAll(k, "/", "."), v, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies (or the one v2
// hierarchy) under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	var dirs []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if info, err := os.Lstat(p); err == nil && info.IsDir() {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// makeCgroupRoot makes name under every hierarchy (the kubelet's
// cgroupRoot must exist), with cpuset's CPUs and memory nodes copied from
// the root so processes may join its children.
func makeCgroupRoot(name string) ([]string, error) {
	var made []string
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return made, fmt.Errorf("make cgroup %s: %w", dir, err)
		}
		made = append(made, dir)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return made, fmt.Errorf("set %s of %s: %w", f, dir, err)
				}
			}
		}
	}
	return made, nil
}

// removeCgroups removes each cgroup tree, deepest first, once the
// processes in it are gone (the PID namespace's end killed them; a
// process still exiting is waited for a little).
func removeCgroups(roots []string) error {
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for try := 0; try < 50; try++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				killCgroup(d)
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

func killCgroup(dir string) {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
