package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	qnv1alpha1 "github.com/quantumnode/qn-admission/api/v1alpha1"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/vap"
)

// RoleTableSync keeps the parameters of qn-admission's
// ValidatingAdmissionPolicy (a QuantumNodeRoleTable, which policies/vap
// compiles from a policy set) equal to the role table of the set qn-controller
// serves, the one qn-webhook serves: so the API server enforces, while the
// webhook is not called, the role table the webhook enforces. It writes at
// start, when the served revision changes, and every Resync (the object
// was edited or deleted by hand), and only when the object differs. It is
// a manager Runnable that runs on the leader.
type RoleTableSync struct {
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
}

// Start implements manager.Runnable.
func (s *RoleTableSync) Start(ctx context.Context) error {
	poll := time.NewTicker(s.PollInterval)
	defer poll.Stop()
	synced, last := "", time.Time{}
	for {
		set := s.Engine.Current()
		if set.Revision != synced || time.Since(last) >= s.Resync {
			if err := s.sync(ctx, set); err != nil {
				// The last written table stays: the API server keeps
				// enforcing it until this succeeds.
				s.Logger.Error(err, "keep the QuantumNodeRoleTable in step with the policies", "name", s.Name, "revision", set.Revision)
			} else {
				synced, last = set.Revision, time.Now()
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
func (*RoleTableSync) NeedLeaderElection() bool { return true }

// sync writes the set's compiled role table when the stored one differs.
func (s *RoleTableSync) sync(ctx context.Context, set *policies.Set) error {
	compiled, err := vap.Compile(set, vap.Options{Name: s.Name, Source: s.Source})
	if err != nil {
		return err
	}
	want := compiled.Params
	have := &qnv1alpha1.QuantumNodeRoleTable{}
	err = s.Reader.Get(ctx, client.ObjectKey{Name: s.Name}, have)
	switch {
	case kerrors.IsNotFound(err):
		if err := s.Client.Create(ctx, want, client.FieldOwner(managerName)); err != nil {
			return fmt.Errorf("create QuantumNodeRoleTable %s: %w", s.Name, err)
		}
		s.Logger.Info("QuantumNodeRoleTable created", "name", s.Name, "revision", set.Revision)
		return nil
	case err != nil:
		return fmt.Errorf("read QuantumNodeRoleTable %s: %w", s.Name, err)
	case equality.Semantic.DeepEqual(have.Spec, want.Spec):
		return nil
	}
	have.Spec = want.Spec
	if err := s.Client.Update(ctx, have, client.FieldOwner(managerName)); err != nil {
		return fmt.Errorf("update QuantumNodeRoleTable %s: %w", s.Name, err)
	}
	s.Logger.Info("QuantumNodeRoleTable updated", "name", s.Name, "revision", set.Revision)
	return nil
}
