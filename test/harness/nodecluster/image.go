package nodecluster

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ImageFile is one file of an image built from this machine's files.
type ImageFile struct {
	// Path inside the image (absolute).
	Path string
	// Data is the content; Mode its permissions.
	Data []byte
	Mode int64
}

// ImageSpec describes a single-layer image to build for this machine.
type ImageSpec struct {
	// Ref is the name containerd knows it by, e.g. qn.local/pause:test.
	Ref   string
	Files []ImageFile
	// Dirs are made in the image besides the files' parents (mode 0755;
	// /tmp is 1777).
	Dirs       []string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
}

// HostFiles returns the host's file at each path, with the shared
// libraries it loads (as ldd lists them), for an image that runs a Debian
// binary such as redis-server. A symlink is followed and stored under the
// path asked for, so a binary that picks its mode from argv[0] (redis)
// keeps its name.
func HostFiles(paths ...string) ([]ImageFile, error) {
	seen := map[string]bool{}
	var files []ImageFile
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read %s for an image: %w", p, err)
		}
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		files = append(files, ImageFile{Path: p, Data: data, Mode: int64(info.Mode().Perm())})
		return nil
	}
	for _, p := range paths {
		if err := add(p); err != nil {
			return nil, err
		}
		libs, err := sharedLibraries(p)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := add(lib); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// sharedLibraries lists the absolute paths ldd prints for binary: the
// libraries and the dynamic loader.
func sharedLibraries(binary string) ([]string, error) {
	out, err := exec.Command("ldd", binary).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", binary, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, field := range strings.Fields(line) {
			if strings.HasPrefix(field, "/") {
				libs = append(libs, field)
			}
		}
	}
	return libs, nil
}

// WriteImage writes spec as an OCI image archive (a tar of an OCI layout,
// one manifest for this machine's platform, named by the
// io.containerd.image.name annotation) that `ctr images import` loads.
func WriteImage(spec ImageSpec, archive string) error {
	layer, err := layerTar(spec)
	if err != nil {
		return err
	}
	layerDigest := digestOf(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      "1970-01-01T00:00:00Z",
		"config": map[string]any{
			"Entrypoint": spec.Entrypoint,
			"Cmd":        spec.Cmd,
			"Env":        spec.Env,
			"User":       spec.User,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	if err != nil {
		return err
	}
	tag := spec.Ref[strings.LastIndex(spec.Ref, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{func() map[string]any {
			d := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
			d["annotations"] = map[string]string{
				"io.containerd.image.name":          spec.Ref,
				"org.opencontainers.image.ref.name": tag,
			}
			d["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
			return d
		}()},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layer), layer},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(archive, out.Bytes(), 0o600)
}

// ArchiveLayout tars an OCI layout directory (what `make image` writes)
// into an archive `ctr images import` loads.
func ArchiveLayout(layoutDir, archive string) error {
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	err := filepath.WalkDir(layoutDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(layoutDir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive the OCI layout %s: %w", layoutDir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(archive, out.Bytes(), 0o600)
}

func layerTar(spec ImageSpec) ([]byte, error) {
	dirs := map[string]int64{"/tmp": 0o1777}
	for _, d := range spec.Dirs {
		if _, ok := dirs[d]; !ok {
			dirs[d] = 0o755
		}
	}
	for _, f := range spec.Files {
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		for p := d; p != "/"; p = path.Dir(p) {
			if _, ok := dirs[p]; !ok {
				dirs[p] = 0o755
			}
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, d := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: dirs[d], ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	return "blobs/sha256/" + strings.TrimPrefix(digestOf(b), "sha256:")
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(b), "size": len(b)}
}
