package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/policies"
)

// errNotServed says the API server does not serve a kind.
var errNotServed = errors.New("not served")

// resourceFinder asks the API server's discovery which resource serves a
// kind. It reads one group version's resource list (GET /api/v1 or
// /apis/<group>/<version>) on each call: client-go's discovery client
// would register every built-in API type at start (its scheme), 20 MiB of
// binary and memory in every qn-webhook, inventory on or off.
type resourceFinder struct {
	client *http.Client
	host   string
}

func newResourceFinder(cfg *rest.Config) (*resourceFinder, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	return &resourceFinder{client: client, host: strings.TrimSuffix(host, "/") + strings.TrimSuffix(cfg.APIPath, "/")}, nil
}

// resolve is the kind, resource and scope of a declared inventory kind; the
// error names its line in roles.yaml and wraps errNotServed when the API
// server answered that it does not serve it.
func (f *resourceFinder) resolve(k policies.InventoryKind) (schema.GroupVersionKind, schema.GroupVersionResource, bool, error) {
	gv, err := schema.ParseGroupVersion(k.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, schema.GroupVersionResource{}, false, fmt.Errorf("%s:%d: inventory kind %s: %v", policies.RolesFile, k.Line, k, err)
	}
	gvk := gv.WithKind(k.Kind)
	resource, namespaced, err := f.find(gvk)
	switch {
	case errors.Is(err, errNotServed):
		return gvk, resource, namespaced, fmt.Errorf("%s:%d: inventory kind %s: the API server does not serve it (%w); install its CRD or fix apiVersion and kind", policies.RolesFile, k.Line, k, err)
	case err != nil:
		return gvk, resource, namespaced, fmt.Errorf("%s:%d: inventory kind %s: the API server's discovery did not answer: %v", policies.RolesFile, k.Line, k, err)
	}
	return gvk, resource, namespaced, nil
}

// find is the resource of gvk and whether it is namespaced; errNotServed
// (wrapped) when the API server does not serve it.
func (f *resourceFinder) find(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	path := "/apis/" + gvk.Group + "/" + gvk.Version
	if gvk.Group == "" {
		path = "/api/" + gvk.Version
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.host+path, nil)
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return schema.GroupVersionResource{}, false, fmt.Errorf("%w: no group version %s", errNotServed, gvk.GroupVersion())
	case resp.StatusCode != http.StatusOK:
		return schema.GroupVersionResource{}, false, fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, body)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return schema.GroupVersionResource{}, false, fmt.Errorf("GET %s: %w", path, err)
	}
	for _, r := range list.APIResources {
		if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
			return gvk.GroupVersion().WithResource(r.Name), r.Namespaced, nil
		}
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("%w: %s has no kind %s", errNotServed, gvk.GroupVersion(), gvk.Kind)
}
