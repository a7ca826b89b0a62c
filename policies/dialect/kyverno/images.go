package kyverno

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/distribution/reference"
)

// Kyverno's `images` variable: the images of a Pod or of a Pod
// controller's template, by container kind and container name:
//
//	images.containers.<name>.{registry, path, name, tag, digest,
//	  reference, referenceWithTag, jsonPointer}
//
// and the same under initContainers and ephemeralContainers. It is read
// from the request's object (none on DELETE, none for other kinds), never
// from the old object, and a container kind without images is absent, as
// is `images` itself when the object has none: a path into it is then
// Kyverno's "Unknown key". A rule's imageExtractors do not change it in
// Kyverno (they only serve verifyImages), so they are refused at load.

// readsImages is Kyverno's test for a query that loads the images (its
// deferred loader's pattern): `images` not preceded by a dot or a word
// character.
var readsImages = regexp.MustCompile(`(?:\A|\z|\s|[^.0-9A-Za-z])images\b`)

// podSpecs are where each kind Kyverno extracts images from keeps its Pod
// spec.
var podSpecs = map[string][]string{
	"Pod":                   {"spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"Deployment":            {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerKinds are the keys of `images`, in Kyverno's extraction order.
var containerKinds = []string{"initContainers", "containers", "ephemeralContainers"}

// defaultRegistry is Kyverno's default (its ConfigMap's defaultRegistry,
// with enableDefaultRegistryMutation on, as it ships).
const defaultRegistry = "docker.io"

// imageSource computes one request's images once, when a rule first reads
// them: rules that do not read images never pay for them.
type imageSource struct {
	obj    map[string]any
	done   bool
	images map[string]any
	err    error
}

// newImageSource is the images of the object a request carries: none on
// DELETE (Kyverno reads the new object only).
func newImageSource(obj map[string]any, op string) *imageSource {
	if obj == nil || op == "DELETE" {
		return &imageSource{done: true}
	}
	return &imageSource{obj: obj}
}

// get is the images, or nil when the object has none.
func (s *imageSource) get() (map[string]any, error) {
	if !s.done {
		s.images, s.err = extractImages(s.obj)
		s.done = true
	}
	return s.images, s.err
}

// extractImages is `images` for obj: nil when its kind has no Pod spec or
// it names no image; an error for a container without a name or an image
// that is not a reference, as in Kyverno.
func extractImages(obj map[string]any) (map[string]any, error) {
	kind, _ := obj["kind"].(string)
	spec, ok := podSpecs[kind]
	if !ok {
		return nil, nil
	}
	var out map[string]any
	for _, ck := range containerKinds {
		fields := append(append(append([]string{}, spec...), ck), "*")
		found := map[string]any{}
		if err := walkImages(obj, nil, fields, found); err != nil {
			return nil, err
		}
		if len(found) > 0 {
			if out == nil {
				out = map[string]any{}
			}
			out[ck] = found
		}
	}
	return out, nil
}

// walkImages follows fields down obj ("*" is every item of a list, or
// every value of a map) to the containers, and adds each container's
// image to found under its name. path is the JSON pointer so far.
func walkImages(obj any, path []string, fields []string, found map[string]any) error {
	if obj == nil {
		return nil
	}
	if len(fields) > 0 && fields[0] == "*" {
		switch t := obj.(type) {
		case []any:
			for i, v := range t {
				at := appendPath(path, strconv.Itoa(i))
				switch v.(type) {
				case map[string]any:
					if err := walkImages(v, at, fields[1:], found); err != nil {
						return err
					}
				case []any:
					if err := walkImages(v, at, fields, found); err != nil {
						return err
					}
				}
			}
			return nil
		case map[string]any:
			for k, v := range t {
				switch v.(type) {
				case map[string]any, []any:
					if err := walkImages(v, appendPath(path, k), fields[1:], found); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	m, ok := obj.(map[string]any)
	if !ok {
		return errors.New("invalid image config")
	}
	if len(fields) > 0 {
		return walkImages(m[fields[0]], appendPath(path, fields[0]), fields[1:], found)
	}
	name, ok := m["name"].(string)
	if !ok {
		return errors.New("invalid key")
	}
	image, ok := m["image"].(string)
	if !ok || strings.TrimSpace(image) == "" {
		return nil
	}
	info, err := imageInfo(image)
	if err != nil {
		return fmt.Errorf("invalid image '%s' (%s)", image, err)
	}
	info["jsonPointer"] = "/" + strings.Join(path, "/") + "/image"
	found[name] = info
	return nil
}

func appendPath(path []string, p string) []string {
	return append(path[:len(path):len(path)], p)
}

// imageInfo is one image as Kyverno describes it: the default registry
// when the reference names none (docker.io, without adding library/),
// tag latest when it has neither tag nor digest; empty fields are left
// out.
func imageInfo(image string) (map[string]any, error) {
	full := image
	if i := strings.IndexByte(image, '/'); i == -1 || !strings.ContainsAny(image[:i], ".:") && image[:i] != "localhost" && strings.ToLower(image[:i]) == image[:i] {
		full = defaultRegistry + "/" + image
	}
	ref, err := reference.Parse(full)
	if err != nil {
		return nil, fmt.Errorf("bad image: %s, defaultRegistry: %s, enableDefaultRegistryMutation: true: %w", full, defaultRegistry, err)
	}
	var registry, path, name, tag, digest string
	if named, ok := ref.(reference.Named); ok {
		registry, path = reference.Domain(named), reference.Path(named)
		name = path[strings.LastIndexByte(path, '/')+1:]
	}
	if t, ok := ref.(reference.Tagged); ok {
		tag = t.Tag()
	}
	if d, ok := ref.(reference.Digested); ok {
		digest = d.Digest().String()
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	repo := path
	if registry != "" {
		repo = registry + "/" + path
	}
	// A digest wins over a tag in the reference; referenceWithTag keeps
	// the tag, empty after the colon when there is only a digest.
	ref2 := repo + ":" + tag
	if digest != "" {
		ref2 = repo + "@" + digest
	}
	out := map[string]any{"name": name, "path": path, "reference": ref2, "referenceWithTag": repo + ":" + tag}
	for k, v := range map[string]string{"registry": registry, "tag": tag, "digest": digest} {
		if v != "" {
			out[k] = v
		}
	}
	return out, nil
}

// mergeImages puts images into vars as Kyverno's context does: merged
// into a map already there (a context variable named images), the
// images' values winning; vars' maps are copied, never changed.
func mergeImages(vars map[string]any, images map[string]any) {
	if prior, ok := vars["images"].(map[string]any); ok {
		if reflect.ValueOf(prior).UnsafePointer() != reflect.ValueOf(images).UnsafePointer() {
			vars["images"] = mergeMaps(prior, images)
		}
		return
	}
	vars["images"] = images
}

func mergeMaps(dst, src map[string]any) map[string]any {
	out := cloneMap(dst)
	for k, v := range src {
		sm, ok := v.(map[string]any)
		if dm, isMap := out[k].(map[string]any); ok && isMap {
			out[k] = mergeMaps(dm, sm)
			continue
		}
		out[k] = v
	}
	return out
}
