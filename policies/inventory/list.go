package inventory

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/rego"
)

// listPage is how many objects one list call asks for.
const listPage = 500

// List reads the declared kinds' objects from the API server cfg reaches,
// once, each pruned to what reads says: the inventory of a judgement made
// once (qnctl audit and impact of a cluster), where qn-webhook keeps a
// watched one (Cluster). Every kind is read or the error names each one
// that could not be, at its line in roles.yaml.
func List(ctx context.Context, cfg *rest.Config, kinds []policies.InventoryKind, reads rego.InventoryReads) (*Snapshot, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	finder, err := newResourceFinder(cfg)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	var objects []map[string]any
	var problems []error
	for _, k := range kinds {
		gvk, resource, _, err := finder.resolve(k)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		opts := metav1.ListOptions{Limit: listPage}
		for {
			list, err := client.Resource(resource).List(ctx, opts)
			if err != nil {
				problems = append(problems, fmt.Errorf("%s:%d: inventory kind %s: list %s: %w", policies.RolesFile, k.Line, k, resource.GroupResource(), err))
				break
			}
			for i := range list.Items {
				item := &list.Items[i]
				// A list's items may leave out what the list says of them.
				item.SetAPIVersion(gvk.GroupVersion().String())
				item.SetKind(gvk.Kind)
				objects = append(objects, item.Object)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return FromObjects(objects, reads)
}
