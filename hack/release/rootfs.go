package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user every image runs as: distroless' "nonroot", the numbers the
// chart's securityContext names (runAsUser/runAsGroup 65532).
const (
	nonrootUID  = 65532
	nonrootHome = "home/nonroot"
)

// binDir is where each image's binary lives (the entrypoint is binDir/name).
const binDir = "usr/local/bin"

// caBundleModule carries the CA certificates of the base layer.
const caBundleModule = "golang.org/x/crypto/x509roots/fallback"

// caBundlePath is where Go's crypto/x509 looks first on Linux (and where
// Debian, Alpine and distroless put the bundle).
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// entry is one file or directory of a layer.
type entry struct {
	// path is relative to the root, without a leading or trailing slash.
	path     string
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

func dir(path string, mode int64) entry { return entry{path: path, dir: true, mode: mode} }

func file(path string, mode int64, data []byte) entry {
	return entry{path: path, mode: mode, data: data}
}

// layerTar writes entries as an uncompressed tar stream that depends on
// nothing but its arguments: entries sorted by path (a directory before
// what it holds), every one stamped with mtime, owners as numbers without
// names, the USTAR format (no PAX records with access or change times).
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, e := range sorted {
		if i > 0 && sorted[i-1].path == e.path {
			return nil, fmt.Errorf("layer: %s appears twice", e.path)
		}
		h := &tar.Header{
			Name:    e.path,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime.UTC().Truncate(time.Second),
			Format:  tar.FormatUSTAR,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipLayer compresses a layer with the standard library's gzip, which
// writes no file name and a zero modification time: for one Go release the
// same tar gives the same bytes, hence the same layer digest. The default
// level: BestCompression took 2.3 times the CPU for 0.7 % smaller images.
func gzipLayer(uncompressed []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(uncompressed); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// baseEntries is the root filesystem every image shares, what a
// distroless "static" image gives, built from pinned inputs instead of
// pulled: CA certificates, the nonroot user and group, /tmp, the nonroot
// home, and no shell or any other program.
func baseEntries() ([]entry, error) {
	roots, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/%s:/sbin/nologin\n", nonrootUID, nonrootUID, nonrootHome)
	group := "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("nonroot:x:%d:\n", nonrootUID)
	// Go's resolver reads the hosts line: /etc/hosts first, then DNS, as
	// glibc does. Without the file Go would also pick files-then-dns, but
	// tools that inspect the image expect it.
	nsswitch := "passwd: files\ngroup: files\nhosts: files dns\n"
	home := dir(nonrootHome, 0o700)
	home.uid, home.gid = nonrootUID, nonrootUID
	return []entry{
		dir("etc", 0o755),
		file("etc/group", 0o644, []byte(group)),
		file("etc/nsswitch.conf", 0o644, []byte(nsswitch)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("etc/ssl", 0o755),
		dir("etc/ssl/certs", 0o755),
		file(caBundlePath, 0o644, roots),
		dir("home", 0o755),
		home,
		// Sticky and writable by all, as on any Linux: the chart mounts an
		// emptyDir here under a read-only root filesystem, `docker run`
		// gets this directory.
		dir("tmp", 0o1777),
		dir("usr", 0o755),
		dir("usr/local", 0o755),
		dir(binDir, 0o755),
	}, nil
}

// caBundle is Mozilla's NSS root store, as the Go project publishes it in
// golang.org/x/crypto/x509roots/fallback/bundle, in PEM. The module version
// in hack/release/go.mod (its hash in go.sum) pins it: the same checkout
// gives the same bytes on every machine, and updating it is `go get`.
// Roots NSS distrusts after a date cannot say so in a PEM file and are left
// out, which is stricter than trusting them for every date.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s has no unconstrained roots", caBundleModule)
	}
	return buf.Bytes(), nil
}

// caBundleVersion is the version of the module the CA certificates come
// from, as this binary was built with it.
func caBundleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == caBundleModule {
				if dep.Replace != nil {
					dep = dep.Replace
				}
				return dep.Version
			}
		}
	}
	return "unknown"
}

// binaryEntries is the layer of one image's program.
func binaryEntries(name string, binary []byte) []entry {
	return []entry{file(binDir+"/"+name, 0o755, binary)}
}
