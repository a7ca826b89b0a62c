package image

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/quantumnode/qn-admission/test/harness/chartrender"
)

// imageSpec is one image make image builds; container is the chart's
// container that runs it ("" for qnctl, which is for CI pipelines, not the
// chart).
type imageSpec struct{ name, container string }

// The images make image builds.
var images = []imageSpec{
	{"qn-webhook", "qn-webhook"},
	{"qn-controller", "qn-controller"},
	{"qnctl", ""},
}

// The user the images run as, and the one path they may write to.
const (
	nonrootUser = "65532:65532"
	nonrootUID  = 65532
	binDir      = "/usr/local/bin"
)

var (
	repoRoot = func() string {
		_, file, _, _ := runtime.Caller(0)
		return filepath.Join(filepath.Dir(file), "..", "..")
	}()

	buildOnce sync.Once
	built     *build
	buildErr  error
)

// build is one make image run: its layouts and what it printed.
type build struct {
	dir    string // the IMAGE_DIR: one layout per image, and images.json
	output string
	// ownBuild: built here for this machine; otherwise QN_IMAGE_LAYOUT.
	ownBuild bool
}

func (b *build) layout(name string) ociLayout { return ociLayout(filepath.Join(b.dir, name)) }

// expectations are the facts the images must carry, read from the source
// tree: the chart's appVersion and source, the commit and its time.
type expectations struct {
	version, source, commit string
	created                 time.Time
}

func expect(t *testing.T) expectations {
	t.Helper()
	ch, err := chartrender.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := expectations{version: ch.Metadata.AppVersion, source: ch.Metadata.Home, commit: "unknown", created: time.Unix(0, 0).UTC()}
	if out, err := gitOutput("rev-parse", "HEAD"); err == nil {
		e.commit = out
	}
	if out, err := gitOutput("log", "-1", "--format=%cI"); err == nil {
		if e.created, err = time.Parse(time.RFC3339, out); err != nil {
			t.Fatal(err)
		}
		e.created = e.created.UTC()
	}
	return e
}

func gitOutput(args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", repoRoot}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// makeImage runs `make image` for this machine's platform with the chart's
// appVersion as version, so the images get exactly the references the
// chart installs, into dir (binaries in dir/bin, layouts in dir/images).
func makeImage(dir string, version string, env ...string) (*build, error) {
	cmd := exec.Command("make", "--no-print-directory", "-C", repoRoot, "image",
		"PLATFORMS=linux/"+runtime.GOARCH, "VERSION="+version,
		"BIN="+filepath.Join(dir, "bin"), "IMAGE_DIR="+filepath.Join(dir, "images"))
	// A make that runs this test must not hand its jobserver to this one.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", cmd, err, out.String())
	}
	fmt.Printf("make image for linux/%s: %s\n", runtime.GOARCH, time.Since(start).Round(time.Second))
	return &build{dir: filepath.Join(dir, "images"), output: out.String(), ownBuild: true}, nil
}

// images returns the images under test: QN_IMAGE_LAYOUT's, or a build of
// this machine's platform made once for every test of the package.
func imagesUnderTest(t *testing.T) *build {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv("QN_IMAGE_LAYOUT"); dir != "" {
			built = &build{dir: dir}
			return
		}
		ch, err := chartrender.Load()
		if err != nil {
			buildErr = err
			return
		}
		built, buildErr = makeImage(tempRoot, ch.Metadata.AppVersion)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// tempRoot holds the package's builds; TestMain removes it.
var tempRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "qn-image-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tempRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// layouts caches what each layout holds: the tests read every one several
// times.
var layouts sync.Map // ociLayout -> *layoutImages

// platforms reads every platform image of a layout, once.
func platforms(t *testing.T, l ociLayout) (descriptor, index, []*platformImage) {
	t.Helper()
	cached, ok := layouts.Load(l)
	if !ok {
		read, err := readLayout(l)
		if err != nil {
			t.Fatal(err)
		}
		cached, _ = layouts.LoadOrStore(l, read)
	}
	li := cached.(*layoutImages)
	return li.top, li.index, li.images
}

// forEachPlatformImage runs check as a subtest for every platform image of
// every image under test.
func forEachPlatformImage(t *testing.T, b *build, check func(t *testing.T, img imageSpec, pi *platformImage, p *platform)) {
	t.Helper()
	for _, img := range images {
		_, _, imgs := platforms(t, b.layout(img.name))
		for _, pi := range imgs {
			t.Run(img.name+" "+platformName(pi.descriptor.Platform), func(t *testing.T) {
				check(t, img, pi, pi.descriptor.Platform)
			})
		}
	}
}

func platformName(p *platform) string {
	if p == nil {
		return "<no platform>"
	}
	return p.OS + "/" + p.Architecture
}

// chartContainers renders the chart with its default values and returns
// each container with the security context of its pod.
func chartContainers(t *testing.T) map[string]struct {
	container corev1.Container
	pod       corev1.PodSpec
} {
	t.Helper()
	rel, err := chartrender.Render("qn", "qn-system", nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		container corev1.Container
		pod       corev1.PodSpec
	}{}
	for _, obj := range rel.Objects {
		if obj.GetKind() != "Deployment" {
			continue
		}
		data, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		var dep appsv1.Deployment
		if err := yaml.Unmarshal(data, &dep); err != nil {
			t.Fatal(err)
		}
		for _, c := range dep.Spec.Template.Spec.Containers {
			out[c.Name] = struct {
				container corev1.Container
				pod       corev1.PodSpec
			}{c, dep.Spec.Template.Spec}
		}
	}
	return out
}

// Each layout holds one multi-platform index, named as the chart names
// the image (so kind load, k3d image import and a push of the layout give
// the reference `helm install` pulls), for the platforms a release ships.
func TestLayoutsNameTheImagesTheChartInstalls(t *testing.T) {
	b := imagesUnderTest(t)
	e := expect(t)
	containers := chartContainers(t)
	wantPlatforms := []string{"linux/" + runtime.GOARCH}
	if !b.ownBuild {
		// Edge nodes are arm64: a release ships both.
		wantPlatforms = []string{"linux/amd64", "linux/arm64"}
	}
	for _, img := range images {
		t.Run(img.name, func(t *testing.T) {
			top, idx, imgs := platforms(t, b.layout(img.name))
			ref := top.Annotations["io.containerd.image.name"]
			repo, tag, _ := strings.Cut(ref, ":")
			if tag != e.version || top.Annotations["org.opencontainers.image.ref.name"] != e.version {
				t.Errorf("layout names %s (ref.name %q); the chart installs version %s: build with VERSION=%s",
					ref, top.Annotations["org.opencontainers.image.ref.name"], e.version, e.version)
			}
			if !strings.HasSuffix(repo, "/"+img.name) {
				t.Errorf("layout names %s, not an image called %s", ref, img.name)
			}
			if img.container != "" {
				c, ok := containers[img.container]
				if !ok {
					t.Fatalf("the chart has no container %s", img.container)
				}
				if c.container.Image != ref {
					t.Errorf("the chart runs %s, the layout holds %s", c.container.Image, ref)
				}
			}
			if top.MediaType != mediaTypeIndex || idx.MediaType != mediaTypeIndex || idx.SchemaVersion != 2 {
				t.Errorf("media types: layout entry %s, index %s (schema %d), want an OCI image index", top.MediaType, idx.MediaType, idx.SchemaVersion)
			}
			var got []string
			for _, pi := range imgs {
				got = append(got, platformName(pi.descriptor.Platform))
				// What registries and `docker buildx imagetools inspect`
				// show for a multi-platform tag: the index's annotations.
				if !maps.Equal(idx.Annotations, pi.config.Config.Labels) {
					t.Errorf("index annotations %v differ from the %s image's labels %v", idx.Annotations, platformName(pi.descriptor.Platform), pi.config.Config.Labels)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, wantPlatforms) {
				t.Errorf("platforms %v, want %v", got, wantPlatforms)
			}
			if b.ownBuild {
				// make image printed the reference and digest it wrote.
				if want := ref + "@" + top.Digest; !strings.Contains(b.output, want+"\n") {
					t.Errorf("make image did not print %s:\n%s", want, b.output)
				}
			}
		})
	}
}

// The config of every image is what the chart relies on: the binary as
// entrypoint (the chart passes args only), the numeric nonroot user its
// securityContext names, nothing to write but the /tmp it mounts, the
// platform the index says, and labels that say where it came from.
func TestImageConfigIsWhatTheChartExpects(t *testing.T) {
	b := imagesUnderTest(t)
	e := expect(t)
	containers := chartContainers(t)
	forEachPlatformImage(t, b, func(t *testing.T, img imageSpec, pi *platformImage, p *platform) {
		cfg := pi.config
		if cfg.OS != p.OS || cfg.Architecture != p.Architecture || cfg.Variant != p.Variant {
			t.Errorf("config says %s/%s/%s, the index %s/%s/%s", cfg.OS, cfg.Architecture, cfg.Variant, p.OS, p.Architecture, p.Variant)
		}
		if p.Architecture == "arm64" && p.Variant != "v8" {
			t.Errorf("arm64 variant %q, want v8", p.Variant)
		}
		if want := []string{binDir + "/" + img.name}; !slices.Equal(cfg.Config.Entrypoint, want) || len(cfg.Config.Cmd) != 0 {
			t.Errorf("entrypoint %q cmd %q, want entrypoint %q and no cmd", cfg.Config.Entrypoint, cfg.Config.Cmd, want)
		}
		if cfg.Config.User != nonrootUser {
			t.Errorf("user %q, want %s", cfg.Config.User, nonrootUser)
		}
		if !slices.Equal(cfg.Config.Env, []string{"PATH=" + binDir}) {
			t.Errorf("env %q: want PATH alone (SSL_CERT_FILE or SSL_CERT_DIR would hide the image's CA bundle)", cfg.Config.Env)
		}
		if len(cfg.Config.Volumes) != 0 || len(cfg.Config.ExposedPorts) != 0 {
			t.Errorf("volumes %v, ports %v: the chart mounts and exposes what it needs", cfg.Config.Volumes, cfg.Config.ExposedPorts)
		}
		if !cfg.Created.Equal(e.created) {
			t.Errorf("created %s, want the commit's time %s", cfg.Created, e.created)
		}
		wantLabels := map[string]string{
			"org.opencontainers.image.title":    img.name,
			"org.opencontainers.image.source":   e.source,
			"org.opencontainers.image.url":      e.source,
			"org.opencontainers.image.revision": e.commit,
			"org.opencontainers.image.version":  e.version,
			"org.opencontainers.image.created":  e.created.Format(time.RFC3339),
		}
		for k, want := range wantLabels {
			if got := cfg.Config.Labels[k]; got != want {
				t.Errorf("label %s = %q, want %q", k, got, want)
			}
		}
		for _, k := range []string{"org.opencontainers.image.licenses", "org.opencontainers.image.description"} {
			if cfg.Config.Labels[k] == "" {
				t.Errorf("label %s is empty", k)
			}
		}
		if img.container == "" {
			return
		}
		c := containers[img.container]
		if len(c.container.Command) != 0 {
			t.Errorf("the chart overrides the entrypoint with %q", c.container.Command)
		}
		sc := c.pod.SecurityContext
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup) != cfg.Config.User {
			t.Errorf("the chart's pod securityContext %+v does not run as the image's user %s", sc, cfg.Config.User)
		}
		csc := c.container.SecurityContext
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Errorf("the chart runs %s without a read-only root filesystem", img.container)
		}
		if !slices.ContainsFunc(c.container.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }) {
			t.Errorf("the chart mounts no writable /tmp into %s, the image's only scratch space", img.container)
		}
	})
}

// Every image's file system is the base layer and its binary, nothing
// else: no shell, no package manager, a pinned CA bundle, the nonroot user,
// every file dated the commit, and a static binary built as make build
// builds it (the images run it with no libc and no loader).
func TestRootFileSystem(t *testing.T) {
	b := imagesUnderTest(t)
	e := expect(t)
	forEachPlatformImage(t, b, func(t *testing.T, img imageSpec, pi *platformImage, p *platform) {
		files, err := pi.files()
		if err != nil {
			t.Fatal(err)
		}
		binary := strings.TrimPrefix(binDir, "/") + "/" + img.name
		want := []string{"etc", "etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl", "etc/ssl/certs",
			"etc/ssl/certs/ca-certificates.crt", "home", "home/nonroot", "tmp", "usr", "usr/local", "usr/local/bin", binary}
		var got []string
		for path, f := range files {
			got = append(got, path)
			if !f.modTime.Equal(e.created) {
				t.Errorf("%s dated %s, want the commit's time %s", path, f.modTime, e.created)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("files %q\nwant %q", got, want)
		}
		for path, want := range map[string]fileEntry{
			"tmp":          {typeflag: '5', mode: 0o1777},
			"home/nonroot": {typeflag: '5', mode: 0o700, uid: nonrootUID, gid: nonrootUID},
			binary:         {typeflag: '0', mode: 0o755},
			"etc/passwd":   {typeflag: '0', mode: 0o644},
		} {
			f := files[path]
			if f.typeflag != want.typeflag || f.mode != want.mode || f.uid != want.uid || f.gid != want.gid {
				t.Errorf("%s: type %c mode %o owner %d:%d, want type %c mode %o owner %d:%d", path,
					f.typeflag, f.mode, f.uid, f.gid, want.typeflag, want.mode, want.uid, want.gid)
			}
		}
		contents := readFiles(t, pi, "etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt", binary)
		if !strings.Contains(contents["etc/passwd"], "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") ||
			!strings.Contains(contents["etc/group"], "\nnonroot:x:65532:\n") {
			t.Errorf("no nonroot user and group 65532:\n%s\n%s", contents["etc/passwd"], contents["etc/group"])
		}
		checkCABundle(t, []byte(contents["etc/ssl/certs/ca-certificates.crt"]))
		checkStaticBinary(t, []byte(contents[binary]), p)
	})
}

// readFiles returns the contents of the named files of an image.
func readFiles(t *testing.T, pi *platformImage, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := pi.walk(func(h *tar.Header, r io.Reader) error {
		if name := h.Name; h.Typeflag == tar.TypeReg && slices.Contains(names, name) {
			data, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			out[name] = string(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCABundle holds the bundle to Mozilla's root store as Go parses it:
// well over a hundred root CA certificates.
func checkCABundle(t *testing.T, bundle []byte) {
	t.Helper()
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Errorf("CA bundle: %d bytes that are no PEM block", len(rest))
			}
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Errorf("CA bundle, certificate %d: %v", n, err)
			continue
		}
		// A root names itself as issuer (Go no longer checks the SHA-1
		// self-signatures some old roots carry, nor needs to).
		if !cert.IsCA || !bytes.Equal(cert.RawSubject, cert.RawIssuer) {
			t.Errorf("CA bundle: %s is not a root CA certificate", cert.Subject)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle has %d certificates; Mozilla's store has well over 100", n)
	}
}

// checkStaticBinary holds a binary to what make build-platforms makes: an
// executable for the platform that needs no loader and no shared library,
// stripped, built without cgo, with -trimpath and the nomsgpack tag.
func checkStaticBinary(t *testing.T, data []byte, p *platform) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if f.Machine != machines[p.Architecture] {
		t.Errorf("binary is for %s, the image for %s", f.Machine, p.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("binary asks for a program interpreter: dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary has a symbol table: not built with -ldflags -s")
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for key, want := range map[string]string{"GOOS": p.OS, "GOARCH": p.Architecture, "CGO_ENABLED": "0", "-trimpath": "true", "-tags": "nomsgpack"} {
		if settings[key] != want {
			t.Errorf("binary built with %s=%q, want %q", key, settings[key], want)
		}
	}
}
