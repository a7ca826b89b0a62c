package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The parts of the OCI image specification these tests read.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    *platform         `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	platform struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
	}
	index struct {
		SchemaVersion int               `json:"schemaVersion"`
		MediaType     string            `json:"mediaType"`
		Manifests     []descriptor      `json:"manifests"`
		Annotations   map[string]string `json:"annotations,omitempty"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
	imageConfig struct {
		Architecture string    `json:"architecture"`
		OS           string    `json:"os"`
		Variant      string    `json:"variant,omitempty"`
		Created      time.Time `json:"created"`
		Config       struct {
			Entrypoint   []string            `json:"Entrypoint"`
			Cmd          []string            `json:"Cmd"`
			User         string              `json:"User"`
			WorkingDir   string              `json:"WorkingDir"`
			Env          []string            `json:"Env"`
			Labels       map[string]string   `json:"Labels"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
			Volumes      map[string]struct{} `json:"Volumes"`
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
)

// The media types an image of ours is made of.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// ociLayout is one OCI image layout directory.
type ociLayout string

// blob reads a blob and checks that its bytes have the digest and the size
// that name it.
func (l ociLayout) blob(d descriptor) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("%s: digest %q is not sha256", l, d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(string(l), "blobs", "sha256", hexDigest))
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexDigest {
		return nil, fmt.Errorf("%s: blob %s has digest sha256:%x", l, d.Digest, sum)
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("%s: blob %s has %d bytes, its descriptor says %d", l, d.Digest, len(data), d.Size)
	}
	return data, nil
}

// readJSON reads a blob that holds JSON of the descriptor's media type.
func (l ociLayout) readJSON(d descriptor, mediaType string, v any) error {
	if d.MediaType != mediaType {
		return fmt.Errorf("%s: %s has media type %s, want %s", l, d.Digest, d.MediaType, mediaType)
	}
	data, err := l.blob(d)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// root is the layout's one entry: the image index of every platform.
func (l ociLayout) root() (descriptor, index, error) {
	var top index
	data, err := os.ReadFile(filepath.Join(string(l), "index.json"))
	if err != nil {
		return descriptor{}, index{}, err
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return descriptor{}, index{}, fmt.Errorf("%s/index.json: %w", l, err)
	}
	if len(top.Manifests) != 1 {
		return descriptor{}, index{}, fmt.Errorf("%s/index.json has %d entries, want the image index alone", l, len(top.Manifests))
	}
	var idx index
	err = l.readJSON(top.Manifests[0], mediaTypeIndex, &idx)
	return top.Manifests[0], idx, err
}

// platformImage is one platform's image of a layout.
type platformImage struct {
	descriptor descriptor
	manifest   manifest
	config     imageConfig
	// tars are the layers uncompressed, in order.
	tars [][]byte
}

// image reads the manifest, config and layers of one platform and checks
// that the config's diff_ids are the layers' uncompressed digests. The
// layers are kept uncompressed: tests read them several times, and
// decompressing is the slow part (more so under -race).
func (l ociLayout) image(d descriptor) (*platformImage, error) {
	img := &platformImage{descriptor: d}
	if err := l.readJSON(d, mediaTypeManifest, &img.manifest); err != nil {
		return nil, err
	}
	if err := l.readJSON(img.manifest.Config, mediaTypeConfig, &img.config); err != nil {
		return nil, err
	}
	if len(img.config.RootFS.DiffIDs) != len(img.manifest.Layers) {
		return nil, fmt.Errorf("%s: %d layers, %d diff_ids", d.Digest, len(img.manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, ld := range img.manifest.Layers {
		if ld.MediaType != mediaTypeLayer {
			return nil, fmt.Errorf("%s: layer %d has media type %s", d.Digest, i, ld.MediaType)
		}
		data, err := l.blob(ld)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", d.Digest, i, err)
		}
		uncompressed, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", d.Digest, i, err)
		}
		if diffID := fmt.Sprintf("sha256:%x", sha256.Sum256(uncompressed)); diffID != img.config.RootFS.DiffIDs[i] {
			return nil, fmt.Errorf("%s: layer %d uncompresses to %s, the config says %s", d.Digest, i, diffID, img.config.RootFS.DiffIDs[i])
		}
		img.tars = append(img.tars, uncompressed)
	}
	return img, nil
}

// readLayout reads a layout's index and every platform's image.
func readLayout(l ociLayout) (*layoutImages, error) {
	top, idx, err := l.root()
	if err != nil {
		return nil, err
	}
	out := &layoutImages{top: top, index: idx}
	for _, d := range idx.Manifests {
		img, err := l.image(d)
		if err != nil {
			return nil, err
		}
		out.images = append(out.images, img)
	}
	return out, nil
}

// layoutImages is what one layout holds.
type layoutImages struct {
	top    descriptor // index.json's entry
	index  index
	images []*platformImage
}

// fileEntry is one entry of an image's file system, as its layers give it.
type fileEntry struct {
	typeflag byte
	mode     int64
	uid, gid int
	modTime  time.Time
	size     int64
}

// files lists the file system the layers make, applied in order, by path
// without a leading slash. Our images never delete or replace a file, so
// a whiteout or a second entry for a path is an error here.
func (img *platformImage) files() (map[string]fileEntry, error) {
	files := map[string]fileEntry{}
	err := img.walk(func(h *tar.Header, _ io.Reader) error {
		name := strings.TrimSuffix(h.Name, "/")
		if strings.HasPrefix(filepath.Base(name), ".wh.") {
			return fmt.Errorf("whiteout %s", h.Name)
		}
		if _, dup := files[name]; dup {
			return fmt.Errorf("%s appears twice", h.Name)
		}
		files[name] = fileEntry{typeflag: h.Typeflag, mode: h.Mode, uid: h.Uid, gid: h.Gid, modTime: h.ModTime, size: h.Size}
		return nil
	})
	return files, err
}

// walk calls fn for every tar entry of every layer, in order.
func (img *platformImage) walk(fn func(*tar.Header, io.Reader) error) error {
	for i, layer := range img.tars {
		tr := tar.NewReader(bytes.NewReader(layer))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
			if err := fn(h, tr); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		}
	}
	return nil
}

// unpack writes the image's file system under dir, with the modes and
// owners the layers give (owners need root; the tests that unpack run
// as root).
func (img *platformImage) unpack(dir string) error {
	var dirs []*tar.Header
	err := img.walk(func(h *tar.Header, r io.Reader) error {
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%s leaves the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, h)
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, r); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
				return err
			}
			if err := os.Chmod(target, os.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry type %q, want files and directories only", h.Name, h.Typeflag)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Directories last: their modes may forbid writing into them.
	for _, h := range dirs {
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := os.Chmod(target, tarMode(h.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// tarMode turns a tar header's mode, whose special bits are those of the
// tar format (04000, 02000, 01000), into an os.FileMode.
func tarMode(mode int64) os.FileMode {
	m := os.FileMode(mode).Perm()
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	return m
}
