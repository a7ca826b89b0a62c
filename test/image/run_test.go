package image

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantumnode/qn-admission/test/promtest"
)

// rootFS is an image's file system unpacked for this machine, run the way
// a container runtime runs it with the chart's securityContext: chrooted,
// as the image's user, with the image's environment, every path read-only
// to that user except /tmp (the chart's emptyDir).
type rootFS struct {
	dir    string
	config imageConfig
}

// unpackForRunning unpacks the image of name for this machine's platform.
// chroot and the image's owners need root: without it the test is skipped,
// except in CI (CI=true), where that is a failure.
func unpackForRunning(t *testing.T, b *build, name string) *rootFS {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := "running the image's binaries chrooted as its user needs root"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED, NOT PASSED: " + msg)
	}
	_, _, imgs := platforms(t, b.layout(name))
	for _, pi := range imgs {
		if p := pi.descriptor.Platform; p.OS != runtime.GOOS || p.Architecture != runtime.GOARCH {
			continue
		}
		dir := filepath.Join(t.TempDir(), "rootfs")
		if err := pi.unpack(dir); err != nil {
			t.Fatal(err)
		}
		// readOnlyRootFilesystem: the nonroot home is not writable either.
		if err := os.Chmod(filepath.Join(dir, "home", "nonroot"), 0o500); err != nil {
			t.Fatal(err)
		}
		return &rootFS{dir: dir, config: pi.config}
	}
	t.Fatalf("%s has no image for %s/%s", name, runtime.GOOS, runtime.GOARCH)
	return nil
}

// command runs path (inside the root) with args as the image would.
func (r *rootFS) command(ctx context.Context, path string, args ...string) *exec.Cmd {
	var uid, gid uint32
	if _, err := fmt.Sscanf(r.config.Config.User, "%d:%d", &uid, &gid); err != nil {
		panic(err)
	}
	// path is absolute, so exec looks nothing up on the host; the child
	// chroots before it executes path.
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = r.config.Config.WorkingDir
	// Container runtimes add HOME from /etc/passwd when the image sets none.
	cmd.Env = append(append([]string{}, r.config.Config.Env...), "HOME=/home/nonroot")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     r.dir,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, NoSetGroups: false, Groups: []uint32{}},
	}
	return cmd
}

// run runs the image's entrypoint with args and returns its output.
func (r *rootFS) run(t *testing.T, stdin []byte, path string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := r.command(ctx, path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The binaries work from the image alone: each answers --version with the
// version, commit and date its labels carry; qn-webhook serves /healthz and
// admission with its self-signed certificate written to /tmp; qnctl lints
// and tests a policy directory as a CI job does; and a Go program in the
// image trusts the image's CA bundle. A dynamic link, a missing CA bundle
// or a write outside /tmp fails here, not in a cluster.
func TestBinariesRunFromTheImage(t *testing.T) {
	b := imagesUnderTest(t)
	e := expect(t)
	for _, img := range images {
		t.Run(img.name+" --version", func(t *testing.T) {
			root := unpackForRunning(t, b, img.name)
			out, err := root.run(t, nil, root.config.Config.Entrypoint[0], "--version")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := fmt.Sprintf("%s %s (commit %s, %s) go", img.name, e.version, e.commit, e.created.Format(time.RFC3339))
			if !strings.HasPrefix(out, want) || !strings.Contains(out, " linux/"+runtime.GOARCH+"\n") {
				t.Errorf("--version printed %q, want %q… linux/%s", out, want, runtime.GOARCH)
			}
		})
	}

	t.Run("qn-webhook serves from a read-only root", func(t *testing.T) {
		root := unpackForRunning(t, b, "qn-webhook")
		admission, probes := freeAddress(t), freeAddress(t)
		cmd := root.command(context.Background(), root.config.Config.Entrypoint[0], "--tls-self-signed",
			"--listen-address="+admission, "--probe-address="+probes)
		logs := processLog(t)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			// As the kubelet stops it: SIGTERM, and a clean exit.
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("qn-webhook did not stop cleanly on SIGTERM: %v\n%s", err, logs.String())
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Errorf("qn-webhook still running 30 s after SIGTERM")
			}
		}()

		healthz := "http://" + probes + "/healthz"
		deadline := time.Now().Add(90 * time.Second)
		for {
			resp, err := http.Get(healthz)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case err := <-exited:
				t.Fatalf("qn-webhook exited before serving: %v\n%s", err, logs.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not answer 200 within 90 s (%v)\n%s", healthz, err, logs.String())
			}
			time.Sleep(200 * time.Millisecond)
		}

		// The self-signed pair lands in the image's /tmp, the one
		// writable path; the CA it wrote verifies the admission listener.
		ca, err := os.ReadFile(filepath.Join(root.dir, "tmp", "qn-webhook-certs", "ca.crt"))
		if err != nil {
			t.Fatalf("the self-signed CA is not in the image's /tmp: %v\n%s", err, logs.String())
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			t.Fatal("ca.crt holds no certificate")
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
		review, err := os.ReadFile(filepath.Join(repoRoot, "test", "testdata", "review-valid.json"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Post("https://"+admission+"/validate", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatalf("POST /validate over TLS: %v\n%s", err, logs.String())
		}
		defer resp.Body.Close()
		var answer struct {
			Response struct {
				Allowed bool `json:"allowed"`
			} `json:"response"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK || !answer.Response.Allowed {
			t.Errorf("POST /validate: %s, allowed=%v, %v", resp.Status, answer.Response.Allowed, err)
		}
	})

	t.Run("qnctl lints and tests a policy directory", func(t *testing.T) {
		root := unpackForRunning(t, b, "qnctl")
		// The CI recipe mounts the policy repository read-only at /work.
		policies := filepath.Join(root.dir, "work", "policies")
		if err := os.CopyFS(policies, os.DirFS(filepath.Join(repoRoot, "rego", "bundle"))); err != nil {
			t.Fatal(err)
		}
		qnctl := root.config.Config.Entrypoint[0]
		if out, err := root.run(t, nil, qnctl, "lint", "/work/policies"); err != nil {
			t.Errorf("qnctl lint: %v\n%s", err, out)
		}
		out, err := root.run(t, nil, qnctl, "test", "/work/policies", "-o", "junit")
		if err != nil {
			t.Fatalf("qnctl test -o junit: %v\n%s", err, out)
		}
		var report struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		}
		if err := xml.Unmarshal([]byte(out), &report); err != nil || report.Tests == 0 || report.Failures != 0 {
			t.Errorf("JUnit report: %d tests, %d failures, %v\n%s", report.Tests, report.Failures, err, out)
		}
	})

	t.Run("Go in the image trusts its CA bundle", func(t *testing.T) {
		root := unpackForRunning(t, b, "qnctl")
		probe := filepath.Join(root.dir, "tmp", "certprobe")
		build := exec.Command("go", "build", "-o", probe, "./testdata/certprobe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if err := os.Chmod(probe, 0o755); err != nil {
			t.Fatal(err)
		}
		bundle, err := os.ReadFile(filepath.Join(root.dir, "etc", "ssl", "certs", "ca-certificates.crt"))
		if err != nil {
			t.Fatal(err)
		}
		// The last root of the bundle: Go verifies it only if it read
		// the bundle from the image's file system.
		var last *pem.Block
		for rest := bundle; ; {
			block, next := pem.Decode(rest)
			if block == nil {
				break
			}
			last, rest = block, next
		}
		if last == nil {
			t.Fatal("no certificate in the CA bundle")
		}
		if out, err := root.run(t, pem.EncodeToMemory(last), "/tmp/certprobe"); err != nil || !strings.HasPrefix(out, "verified ") {
			t.Errorf("a Go program in the image does not trust the bundle's roots: %v\n%s", err, out)
		}
		// And the probe is not fooled: without the bundle, nothing verifies.
		if err := os.Remove(filepath.Join(root.dir, "etc", "ssl", "certs", "ca-certificates.crt")); err != nil {
			t.Fatal(err)
		}
		if out, err := root.run(t, pem.EncodeToMemory(last), "/tmp/certprobe"); err == nil {
			t.Errorf("the probe verified without a CA bundle:\n%s", out)
		}
	})
}

// freeAddress is a loopback address whose port was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	address, err := promtest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return address
}

// logFile is a process's output in a file the test can read while the
// process runs.
type logFile struct{ *os.File }

func processLog(t *testing.T) logFile {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return logFile{f}
}

func (l logFile) String() string {
	data, _ := os.ReadFile(l.Name())
	return string(data)
}

// The same commit gives the same images: a second make image, into other
// directories and in another time zone, links the binaries anew (new paths,
// new file times) and rebuilds every layer, and every digest matches the
// first.
func TestImagesAreReproducible(t *testing.T) {
	b := imagesUnderTest(t)
	if !b.ownBuild {
		t.Skip("QN_IMAGE_LAYOUT is set: these are someone else's images; rebuild them with make image and compare")
	}
	e := expect(t)
	again, err := makeImage(t.TempDir(), e.version, "TZ=Pacific/Chatham")
	if err != nil {
		t.Fatal(err)
	}
	first, second := readImagesJSON(t, b.dir), readImagesJSON(t, again.dir)
	if len(first) != len(images) || len(second) != len(first) {
		t.Fatalf("images.json lists %d and %d images, want %d", len(first), len(second), len(images))
	}
	for i, img := range first {
		t.Logf("%s:%s@%s %v", img.Repository, img.Tag, img.Digest, img.Platforms)
		if other := second[i]; other.Digest != img.Digest {
			t.Errorf("%s: index %s, then %s", img.Name, img.Digest, other.Digest)
			for k, p := range img.Platforms {
				if p.Digest != other.Platforms[k].Digest {
					t.Errorf("%s %s: manifest %s, then %s; %s", img.Name, p.Platform, p.Digest, other.Platforms[k].Digest,
						diffImages(t, b.layout(img.Name), again.layout(img.Name), k))
				}
			}
		}
	}
}

// imagesJSON is the part of images.json these tests read.
type imagesJSON []struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
	Platforms  []struct {
		Platform string `json:"platform"`
		Digest   string `json:"digest"`
		Size     int64  `json:"size"`
	} `json:"platforms"`
}

func readImagesJSON(t *testing.T, dir string) imagesJSON {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list imagesJSON
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// diffImages says which part of two builds of one platform image differs.
func diffImages(t *testing.T, a, b ociLayout, platform int) string {
	t.Helper()
	_, _, imgsA := platforms(t, a)
	_, _, imgsB := platforms(t, b)
	ia, ib := imgsA[platform], imgsB[platform]
	var parts []string
	if ia.manifest.Config.Digest != ib.manifest.Config.Digest {
		ca, _ := json.Marshal(ia.config)
		cb, _ := json.Marshal(ib.config)
		parts = append(parts, fmt.Sprintf("config differs:\n%s\n%s", ca, cb))
	}
	for i := range ia.manifest.Layers {
		if i < len(ib.manifest.Layers) && ia.config.RootFS.DiffIDs[i] != ib.config.RootFS.DiffIDs[i] {
			parts = append(parts, fmt.Sprintf("layer %d's files differ", i))
		} else if i < len(ib.manifest.Layers) && ia.manifest.Layers[i].Digest != ib.manifest.Layers[i].Digest {
			parts = append(parts, fmt.Sprintf("layer %d compresses differently", i))
		}
	}
	return strings.Join(parts, "; ")
}
