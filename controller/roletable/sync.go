// Package roletable keeps the parameters of qn-admission's
// ValidatingAdmissionPolicy (a QuantumNodeRoleTable, compiled by
// policies/vap) in step with the role table qn-controller serves, so the
// API server enforces, while the webhook is not called, the table the
// webhook enforces.
package roletable

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/controller"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
)

// Sync keeps the parameters of qn-admission's
// ValidatingAdmissionPolicy (a QuantumNodeRoleTable, which policies/vap
// compiles from a policy set) equal to the role table of the set qn-controller
// serves, the one qn-webhook serves: so the API server enforces, while the
// webhook is not called, the role table the webhook enforces. It writes at
// start, when the served revision changes, and every Resync (the object
// was edited or deleted by hand), and only when the object differs. It is
// a manager Runnable that runs on the leader.
type Sync struct {
	// Name of the QuantumNodeRoleTable (the policy's binding names it).
	Name   string
	Engine *policies.Engine
	// Source names the policy directory in the object ("bundled" or a path).
	Source string
	// Client writes; Reader reads from the API server, not a cache: one
	// object read once a minute needs no informer (nor list and watch).
	Client client.Client
	Reader client.Reader
	// PollInterval is how often the served revision is compared;
	// Resync how often the object is compared even when it has not
	// changed.
	PollInterval, Resync time.Duration
	Logger               logr.Logger
	// Labels and Annotations are kept on the object besides what it
	// holds: Helm's ownership marks (HelmOwnership), so an upgrade that
	// renders the table itself adopts this one instead of refusing it.
	Labels, Annotations map[string]string
}

// HelmOwnership are the label and annotations by which Helm adopts an
// object it did not create into release name of namespace.
func HelmOwnership(namespace, name string) (labels, annotations map[string]string) {
	return map[string]string{"app.kubernetes.io/managed-by": "Helm"},
		map[string]string{"meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": namespace}
}

// keepMarks sets labels and annotations on obj, and says whether any was
// missing or different.
func keepMarks(obj metav1.Object, labels, annotations map[string]string) bool {
	changed := false
	set := func(get func() map[string]string, put func(map[string]string), want map[string]string) {
		have := get()
		for k, v := range want {
			if have[k] == v {
				continue
			}
			if have == nil {
				have = map[string]string{}
			}
			have[k], changed = v, true
		}
		put(have)
	}
	set(obj.GetLabels, obj.SetLabels, labels)
	set(obj.GetAnnotations, obj.SetAnnotations, annotations)
	return changed
}

// Start implements manager.Runnable.
func (s *Sync) Start(ctx context.Context) error {
	poll := time.NewTicker(s.PollInterval)
	defer poll.Stop()
	synced, last, failed := "", time.Time{}, ""
	for {
		set := s.Engine.Current()
		if set.Revision != synced || time.Since(last) >= s.Resync {
			if err := s.sync(ctx, set); err != nil {
				// Tried again at the next poll; said once until it
				// changes.
				if err.Error() != failed {
					s.Logger.Error(err, "keep the QuantumNodeRoleTable in step with the policies", "name", s.Name, "revision", set.Revision)
				}
				failed = err.Error()
			} else {
				synced, last, failed = set.Revision, time.Now(), ""
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*Sync) NeedLeaderElection() bool { return true }

// sync writes the set's compiled role table when the stored one differs.
// A set whose table does not compile (it exceeds the parameters' limits)
// removes the stored one: the policy then stands aside
// (parameterNotFoundAction Allow) and the webhook alone judges, where
// keeping the last table would have the API server refuse by an old table
// what the webhook now admits (a role just added, say).
func (s *Sync) sync(ctx context.Context, set *policies.Set) error {
	compiled, err := vap.Compile(set, vap.Options{Name: s.Name, Source: s.Source})
	if err != nil {
		stale := &qnv1alpha1.QuantumNodeRoleTable{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}
		if derr := s.Client.Delete(ctx, stale); derr != nil && !kerrors.IsNotFound(derr) {
			return fmt.Errorf("%w; and the stale QuantumNodeRoleTable %s could not be removed, so the API server still enforces it: %v", err, s.Name, derr)
		}
		return fmt.Errorf("%w; QuantumNodeRoleTable %s removed: the API server's copy of the role table stands aside until the table compiles", err, s.Name)
	}
	want := compiled.Params
	have := &qnv1alpha1.QuantumNodeRoleTable{}
	err = s.Reader.Get(ctx, client.ObjectKey{Name: s.Name}, have)
	switch {
	case kerrors.IsNotFound(err):
		keepMarks(want, s.Labels, s.Annotations)
		if err := s.Client.Create(ctx, want, client.FieldOwner(controller.ManagerName)); err != nil {
			return fmt.Errorf("create QuantumNodeRoleTable %s: %w", s.Name, err)
		}
		s.Logger.Info("QuantumNodeRoleTable created", "name", s.Name, "revision", set.Revision)
		return nil
	case err != nil:
		return fmt.Errorf("read QuantumNodeRoleTable %s: %w", s.Name, err)
	}
	marked := keepMarks(have, s.Labels, s.Annotations)
	if !marked && equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return nil
	}
	have.Spec = want.Spec
	if err := s.Client.Update(ctx, have, client.FieldOwner(controller.ManagerName)); err != nil {
		return fmt.Errorf("update QuantumNodeRoleTable %s: %w", s.Name, err)
	}
	s.Logger.Info("QuantumNodeRoleTable updated", "name", s.Name, "revision", set.Revision)
	return nil
}
