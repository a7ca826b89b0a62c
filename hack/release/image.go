package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// descriptions are the images this tool knows, each named for its binary.
var descriptions = map[string]string{
	"qn-webhook":    "qn-admission's admission webhook for QuantumNodes: Rego policies routed by roles, rate windows, a decision log",
	"qn-controller": "qn-admission's controller: reconciles QuantumNodes and audits them against the webhook's policies",
	"qnctl":         "qn-admission's policy CLI for CI pipelines: eval, test and lint policies offline with the webhook's engine",
}

// Annotations of the OCI layout's index.json that name an image for the
// tools that import a layout: containerd (kind load, k3d image import,
// ctr), Docker 25+ and podman.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// dockerTag is the grammar of a tag in an image reference.
var dockerTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// imageOptions are the flags of `release image`.
type imageOptions struct {
	binaries  string
	out       string
	registry  string
	version   string
	commit    string
	date      string
	source    string
	licenses  string
	names     []string
	platforms []v1.Platform
	created   time.Time
}

// builtImage is one image as images.json records it, for the release
// steps that push, sign and pin it.
type builtImage struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	// Digest is the image index's: what a multi-architecture pull resolves.
	Digest string `json:"digest"`
	// Layout is the OCI layout directory, relative to images.json.
	Layout    string          `json:"layout"`
	Platforms []builtPlatform `json:"platforms"`
}

// builtPlatform is one architecture's image of a builtImage.
type builtPlatform struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	// Size is what a node pulls: the manifest's config and layers,
	// compressed.
	Size int64 `json:"size"`
}

// Reference is the image's tagged reference.
func (b builtImage) Reference() string { return b.Repository + ":" + b.Tag }

func imageCommand(args []string, stdout, stderr io.Writer) error {
	o := imageOptions{}
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.binaries, "binaries", "", "directory holding <os>_<arch>/<name> for every platform and name (make build-platforms)")
	fs.StringVar(&o.out, "out", "", "directory to write one OCI layout per image into, and images.json")
	fs.StringVar(&o.registry, "registry", "", "registry and path the images are named under, e.g. ghcr.io/quantumnode")
	fs.StringVar(&o.version, "version", "", "release version: the tag, and the label org.opencontainers.image.version")
	fs.StringVar(&o.commit, "commit", "", "commit the binaries were built from (label org.opencontainers.image.revision)")
	fs.StringVar(&o.date, "date", "", "the commit's time, RFC 3339: every file's mtime and the image's created time")
	fs.StringVar(&o.source, "source", "", "URL of the source repository (label org.opencontainers.image.source)")
	fs.StringVar(&o.licenses, "licenses", "", "SPDX license expression (label org.opencontainers.image.licenses)")
	names := fs.String("names", "qn-webhook qn-controller qnctl", "images to build, space-separated")
	platforms := fs.String("platforms", "linux/amd64 linux/arm64", "platforms to build, space-separated os/arch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if err := o.complete(*names, *platforms); err != nil {
		return err
	}
	images, err := buildImages(o)
	if err != nil {
		return err
	}
	for _, img := range images {
		fmt.Fprintf(stdout, "%s@%s\n", img.Reference(), img.Digest)
		for _, p := range img.Platforms {
			fmt.Fprintf(stdout, "  %-15s %s  %5.1f MB\n", p.Platform, p.Digest, float64(p.Size)/1e6)
		}
	}
	fmt.Fprintf(stdout, "OCI layouts and images.json in %s\n", o.out)
	return nil
}

// complete checks the flags and parses the lists and the date.
func (o *imageOptions) complete(names, platforms string) error {
	for _, f := range []struct{ name, value string }{
		{"binaries", o.binaries}, {"out", o.out}, {"registry", o.registry}, {"version", o.version},
		{"commit", o.commit}, {"date", o.date}, {"source", o.source}, {"licenses", o.licenses},
	} {
		if f.value == "" {
			return usagef("--%s is required", f.name)
		}
	}
	if !dockerTag.MatchString(o.version) {
		return usagef("--version %q cannot be an image tag (letters, digits, _ . -, at most 128, not starting with . or -)", o.version)
	}
	created, err := time.Parse(time.RFC3339, o.date)
	if err != nil {
		return usagef("--date %q is not an RFC 3339 time such as 2026-11-25T18:29:00Z: %v", o.date, err)
	}
	o.created = created.UTC()
	o.registry = strings.TrimSuffix(o.registry, "/")
	for _, name := range strings.Fields(names) {
		if _, ok := descriptions[name]; !ok {
			return usagef("--names: no image %q; known: qn-webhook, qn-controller, qnctl", name)
		}
		o.names = append(o.names, name)
	}
	for _, s := range strings.Fields(platforms) {
		p, err := v1.ParsePlatform(s)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return usagef("--platforms: %q is not os/arch such as linux/arm64", s)
		}
		if _, ok := elfMachines[p.Architecture]; !ok || p.OS != "linux" {
			return usagef("--platforms: %q is not a Linux platform this tool knows", s)
		}
		// arm64 images are arm64/v8 wherever the variant is spelled out
		// (docker buildx, ko, the OCI image index specification).
		if p.Architecture == "arm64" && p.Variant == "" {
			p.Variant = "v8"
		}
		o.platforms = append(o.platforms, *p)
	}
	if len(o.names) == 0 || len(o.platforms) == 0 {
		return usagef("--names and --platforms must name at least one image and platform")
	}
	return nil
}

// labels are the OCI labels of every image's config (and the annotations
// of its index), the keys of the OCI image specification's
// annotations.md.
func (o imageOptions) labels(name string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       name,
		"org.opencontainers.image.description": descriptions[name],
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.url":         o.source,
		"org.opencontainers.image.revision":    o.commit,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    o.licenses,
	}
}

// buildImages builds every image for every platform, writes the layouts
// and images.json, and returns what it wrote.
func buildImages(o imageOptions) ([]builtImage, error) {
	base, err := baseEntries()
	if err != nil {
		return nil, err
	}
	baseLayer, err := newLayer(base, o.created)
	if err != nil {
		return nil, err
	}
	baseHistory := v1.History{
		Created:   v1.Time{Time: o.created},
		CreatedBy: fmt.Sprintf("qn-admission hack/release: /%s (Mozilla NSS roots from %s %s), /etc/passwd and /etc/group (nonroot %d), /tmp; no shell", caBundlePath, caBundleModule, caBundleVersion(), nonrootUID),
		Comment:   "shared base layer",
	}

	// Every (image, platform) pair is independent; compressing binaries
	// is most of the work, so run as many as there are CPUs.
	type job struct {
		name     string
		platform v1.Platform
		image    v1.Image
		err      error
	}
	var jobs []*job
	for _, name := range o.names {
		for _, p := range o.platforms {
			jobs = append(jobs, &job{name: name, platform: p})
		}
	}
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			j.image, j.err = buildImage(o, j.name, j.platform, baseLayer, baseHistory)
		}()
	}
	wg.Wait()

	var built []builtImage
	for i, name := range o.names {
		var adds []mutate.IndexAddendum
		img := builtImage{Name: name, Repository: o.registry + "/" + name, Tag: o.version, Layout: name}
		for k, p := range o.platforms {
			j := jobs[i*len(o.platforms)+k]
			if j.err != nil {
				return nil, j.err
			}
			digest, err := j.image.Digest()
			if err != nil {
				return nil, err
			}
			size, err := pullSize(j.image)
			if err != nil {
				return nil, err
			}
			img.Platforms = append(img.Platforms, builtPlatform{Platform: platformString(p), Digest: digest.String(), Size: size})
			adds = append(adds, mutate.IndexAddendum{Add: j.image, Descriptor: v1.Descriptor{Platform: &p}})
		}
		index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		index = mutate.AppendManifests(index, adds...)
		index = mutate.Annotations(index, o.labels(name)).(v1.ImageIndex)
		digest, err := index.Digest()
		if err != nil {
			return nil, err
		}
		img.Digest = digest.String()
		if err := writeLayout(filepath.Join(o.out, name), index, img); err != nil {
			return nil, err
		}
		built = append(built, img)
	}
	manifest, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.out, "images.json"), append(manifest, '\n'), 0o644); err != nil {
		return nil, err
	}
	return built, nil
}

// buildImage is one platform's image of one binary: the base layer, then
// the binary's layer, and a config that runs it as nonroot.
func buildImage(o imageOptions, name string, p v1.Platform, baseLayer v1.Layer, baseHistory v1.History) (v1.Image, error) {
	path := filepath.Join(o.binaries, p.OS+"_"+p.Architecture, name)
	binary, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the %s binary for %s: %w (make build-platforms builds it)", name, platformString(p), err)
	}
	if err := checkBinary(path, binary, p); err != nil {
		return nil, err
	}
	binLayer, err := newLayer(binaryEntries(name, binary), o.created)
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			Entrypoint: []string{"/" + binDir + "/" + name},
			// Numbers, not the name: the kubelet can only check
			// runAsNonRoot against a numeric user.
			User:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
			WorkingDir: "/",
			Env:        []string{"PATH=/" + binDir},
			Labels:     o.labels(name),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, History: baseHistory, MediaType: types.OCILayer},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: fmt.Sprintf("qn-admission hack/release: /%s/%s (CGO_ENABLED=0 go build -trimpath -tags nomsgpack, version %s, commit %s)", binDir, name, o.version, o.commit),
		}},
	)
}

// newLayer is a gzip-compressed OCI layer of entries, compressed once and
// kept in memory.
func newLayer(entries []entry, mtime time.Time) (v1.Layer, error) {
	uncompressed, err := layerTar(entries, mtime)
	if err != nil {
		return nil, err
	}
	compressed, err := gzipLayer(uncompressed)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// pullSize is the compressed size of an image's config and layers.
func pullSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return size, nil
}

// writeLayout writes index as the only entry of a fresh OCI layout at dir,
// named so that importers tag it img.Reference().
func writeLayout(dir string, index v1.ImageIndex, img builtImage) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{
		annotationRefName:        img.Tag,
		annotationContainerdName: img.Reference(),
	})); err != nil {
		return fmt.Errorf("write %s into the OCI layout %s: %w", img.Reference(), dir, err)
	}
	return nil
}
