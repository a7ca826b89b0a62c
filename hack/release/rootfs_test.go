package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// A layer's bytes depend on nothing but its entries and the commit time:
// not on the order they are given in, not on the clock, not on the zone.
func TestLayerTarIsDeterministic(t *testing.T) {
	mtime := time.Date(2026, 11, 25, 15, 23, 47, 123456789, time.FixedZone("CHAST", 12*3600+45*60))
	entries, err := baseEntries()
	if err != nil {
		t.Fatal(err)
	}
	first, err := layerTar(entries, mtime)
	if err != nil {
		t.Fatal(err)
	}
	reversed := make([]entry, len(entries))
	for i, e := range entries {
		reversed[len(entries)-1-i] = e
	}
	second, err := layerTar(reversed, mtime.UTC())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("the same entries in another order, or the same time in another zone, gave another tar")
	}
	gz1, err := gzipLayer(first)
	if err != nil {
		t.Fatal(err)
	}
	gz2, err := gzipLayer(second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gz1, gz2) {
		t.Fatal("the same tar compressed to other bytes")
	}

	var names []string
	tr := tar.NewReader(bytes.NewReader(first))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(mtime.Truncate(time.Second)) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: mtime %s atime %s ctime %s, want the commit's time alone", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
		if h.Uname != "" || h.Gname != "" || h.Format != tar.FormatUSTAR {
			t.Errorf("%s: owner names %q/%q, format %v: want numbers only, USTAR", h.Name, h.Uname, h.Gname, h.Format)
		}
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("entries out of order: %s before %s", names[i-1], names[i])
		}
	}
}

func TestLayerTarRefusesAPathTwice(t *testing.T) {
	_, err := layerTar([]entry{file("etc/passwd", 0o644, nil), file("etc/passwd", 0o600, nil)}, time.Unix(0, 0))
	if err == nil || !strings.Contains(err.Error(), "etc/passwd appears twice") {
		t.Errorf("err = %v", err)
	}
}

// The base layer holds what a distroless static image does and no program
// at all.
func TestBaseEntries(t *testing.T) {
	entries, err := baseEntries()
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]entry{}
	for _, e := range entries {
		byPath[e.path] = e
		if !e.dir && e.mode&0o111 != 0 {
			t.Errorf("%s is executable; the base layer holds no program", e.path)
		}
	}
	if e := byPath["tmp"]; !e.dir || e.mode != 0o1777 {
		t.Errorf("tmp: %+v, want a sticky directory writable by all", e)
	}
	if e := byPath[nonrootHome]; !e.dir || e.uid != nonrootUID || e.gid != nonrootUID {
		t.Errorf("%s: %+v, want a directory owned by %d", nonrootHome, e, nonrootUID)
	}
	if !strings.Contains(string(byPath["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd:\n%s", byPath["etc/passwd"].data)
	}
	roots := 0
	for rest := byPath[caBundlePath].data; ; roots++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("root %d: %v", roots, err)
		}
	}
	if roots < 100 {
		t.Errorf("%d roots in %s", roots, caBundlePath)
	}
}
