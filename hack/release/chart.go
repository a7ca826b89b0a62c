package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// chartImages maps each image the chart installs to the block of
// values.yaml that names it.
var chartImages = []struct{ image, values string }{
	{"qn-webhook", "webhook"},
	{"qn-controller", "controller"},
}

func pinChartCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pin-chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	chartDir := fs.String("chart", "", "the chart's directory (charts/qn-admission)")
	imagesFile := fs.String("images", "", "images.json that `release image` wrote")
	out := fs.String("out", "", "directory to copy the pinned chart into (replaced)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *chartDir == "" || *imagesFile == "" || *out == "" {
		return usagef("--chart, --images and --out are required")
	}
	images, err := readImages(*imagesFile)
	if err != nil {
		return err
	}
	if err := copyDir(*chartDir, *out); err != nil {
		return err
	}
	valuesPath := filepath.Join(*out, "values.yaml")
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return err
	}
	pinned, err := pinValues(values, images)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(*chartDir, "values.yaml"), err)
	}
	if err := os.WriteFile(valuesPath, pinned, 0o644); err != nil {
		return err
	}
	for _, ci := range chartImages {
		img := images[ci.image]
		fmt.Fprintf(stdout, "%s.image: %s@%s\n", ci.values, img.Repository, img.Digest)
	}
	return nil
}

// readImages reads images.json, by image name.
func readImages(path string) (map[string]builtImage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (written by make image): %w", path, err)
	}
	var list []builtImage
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	images := map[string]builtImage{}
	for _, img := range list {
		images[img.Name] = img
	}
	return images, nil
}

// pinValues sets <block>.image.digest of every image the chart installs,
// after checking that the chart names the repository the image was built
// for: the release pushes where the chart pulls from, or fails here. Only
// the digests' text changes (comments, order and layout stay); the result
// is checked to mean the original values with the digests set.
func pinValues(values []byte, images map[string]builtImage) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping of values")
	}
	var want map[string]any
	if err := yaml.Unmarshal(values, &want); err != nil {
		return nil, err
	}
	lines := strings.Split(string(values), "\n")
	for _, ci := range chartImages {
		img, ok := images[ci.image]
		if !ok {
			return nil, fmt.Errorf("no %s image was built, and the chart installs it", ci.image)
		}
		block := lookup(doc.Content[0], ci.values, "image")
		if block == nil || block.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("no %s.image block", ci.values)
		}
		repo := lookup(block, "repository")
		if repo == nil || repo.Value != img.Repository {
			got := "nothing"
			if repo != nil {
				got = repo.Value
			}
			return nil, fmt.Errorf("%s.image.repository is %s, but %s was built as %s: build with REGISTRY set to the chart's registry, or change the chart", ci.values, got, ci.image, img.Repository)
		}
		digest := lookup(block, "digest")
		if digest == nil || digest.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("no %s.image.digest to pin", ci.values)
		}
		if err := replaceScalar(lines, digest, img.Digest); err != nil {
			return nil, fmt.Errorf("%s.image.digest: %w", ci.values, err)
		}
		want[ci.values].(map[string]any)["image"].(map[string]any)["digest"] = img.Digest
	}
	pinned := []byte(strings.Join(lines, "\n"))
	var got map[string]any
	if err := yaml.Unmarshal(pinned, &got); err != nil {
		return nil, fmt.Errorf("pinned values do not parse: %w", err)
	}
	if !reflect.DeepEqual(got, want) {
		return nil, fmt.Errorf("pinning changed more than the digests")
	}
	return pinned, nil
}

// lookup follows keys through nested mappings.
func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	for _, key := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// replaceScalar replaces the text of a one-line scalar in place with value,
// double-quoted.
func replaceScalar(lines []string, n *yaml.Node, value string) error {
	if n.Line < 1 || n.Line > len(lines) {
		return fmt.Errorf("line %d out of range", n.Line)
	}
	line := lines[n.Line-1]
	start := n.Column - 1
	if start < 0 || start >= len(line) {
		return fmt.Errorf("line %d: column %d out of range", n.Line, n.Column)
	}
	var end int
	switch quote := line[start]; quote {
	case '"', '\'':
		i := strings.IndexByte(line[start+1:], quote)
		if i < 0 {
			return fmt.Errorf("line %d: a quoted value over several lines", n.Line)
		}
		end = start + 1 + i + 1
	default:
		end = len(line)
		if i := strings.Index(line[start:], " #"); i >= 0 {
			end = start + i
		}
		end = start + len(strings.TrimRight(line[start:end], " "))
	}
	lines[n.Line-1] = line[:start] + `"` + value + `"` + line[end:]
	return nil
}

// copyDir copies the regular files and directories of src to a fresh dst.
func copyDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		default:
			return fmt.Errorf("%s: only files and directories can be copied", path)
		}
	})
}
