package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/quantumnode/qn-admission/internal/health"
	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/inventory"
)

// InventoryOptions configure the cluster inventory: the stored objects of
// the kinds roles.yaml declares under inventory, which policies read as
// data.inventory.
type InventoryOptions struct {
	// Enabled watches the declared kinds; without it data.inventory is
	// undefined and rules that read it say nothing.
	Enabled bool
	// Kubeconfig reaches the API server; empty: the Pod's service account.
	Kubeconfig string
	// MaxLag is how far behind the API server policies may read it.
	MaxLag time.Duration
	// PublishInterval gathers changes into one new document: the delay
	// of a change before policies see it, against the work of each new
	// document (an index rule is built again once per document).
	PublishInterval time.Duration
	// SyncTimeout is how long /readyz waits for the first sync; after it
	// the webhook is ready without it, and the roles that read it follow
	// their onError until it syncs (no lock-out by an inventory that
	// cannot sync: a role with onError allow goes on admitting).
	SyncTimeout time.Duration
}

// DefaultInventoryOptions are the defaults: off (the chart turns it on).
func DefaultInventoryOptions() InventoryOptions {
	return InventoryOptions{MaxLag: inventory.DefaultMaxLag, SyncTimeout: 2 * time.Minute, PublishInterval: inventory.DefaultPublishInterval}
}

// AddFlags binds the options to fs.
func (o *InventoryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "inventory", o.Enabled, "Keep an inventory of the kinds roles.yaml declares under inventory (list/watch on them), which policies read as data.inventory. Without it data.inventory is undefined.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "With --inventory, the kubeconfig that reaches the API server (default: the Pod's service account).")
	fs.DurationVar(&o.MaxLag, "inventory-max-lag", o.MaxLag, "How far behind the API server the inventory may be (a broken watch) before policies that read it fail and their role's onError decides; also the strict health bound.")
	fs.DurationVar(&o.PublishInterval, "inventory-publish-interval", o.PublishInterval, "How often the inventory's changes are gathered into the document policies read: a change waits up to this long, and each new document costs the rules that index the inventory one evaluation.")
	fs.DurationVar(&o.SyncTimeout, "inventory-sync-timeout", o.SyncTimeout, "How long /readyz waits for the inventory's first sync; after it the webhook is ready and roles that read the inventory follow onError until it syncs.")
}

// Validate reports an option that cannot work.
func (o *InventoryOptions) Validate() error {
	switch {
	case o.MaxLag <= 0:
		return fmt.Errorf("--inventory-max-lag must be positive, got %s", o.MaxLag)
	case o.PublishInterval <= 0 || o.PublishInterval > o.MaxLag:
		return fmt.Errorf("--inventory-publish-interval must be positive and at most --inventory-max-lag (%s), got %s", o.MaxLag, o.PublishInterval)
	case o.SyncTimeout < 0:
		return fmt.Errorf("--inventory-sync-timeout must not be negative, got %s", o.SyncTimeout)
	}
	return nil
}

// connectInventory makes the inventory's client with --inventory; the
// kinds come with the policy set (buildInventory).
func (p *Program) connectInventory(context.Context) error {
	o := p.Options.Inventory
	if !o.Enabled {
		return nil
	}
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("--inventory: no API server to watch (set --kubeconfig outside a Pod): %w", err)
	}
	// client-go's own logs (discovery, reflectors) go to the program's
	// logger, in its format.
	klog.SetSlogLogger(p.Logger.With("part", "client-go"))
	p.Inventory, err = inventory.NewCluster(inventory.ClusterOptions{Config: cfg, MaxLag: o.MaxLag, PublishInterval: o.PublishInterval, Logger: p.Logger.With("part", "inventory")})
	return err
}

// policyInventory is the engine's inventory: none without --inventory.
func (p *Program) policyInventory() policies.Inventory {
	if p.Inventory == nil {
		return nil
	}
	return p.Inventory
}

// buildInventory watches the kinds the served set declares (a kind the
// API server does not serve stops the start, named at its roles.yaml
// line), follows the set through reloads, and adds the readiness check,
// strict health and metrics.
func (p *Program) buildInventory(context.Context) error {
	inv := p.Inventory
	if inv == nil {
		if set := p.Engine.Current(); set != nil && len(set.InventoryKinds()) > 0 {
			p.Logger.Info("roles.yaml declares an inventory, but --inventory is off: data.inventory is undefined and rules that read it say nothing", "kinds", len(set.InventoryKinds()))
		}
		return nil
	}
	set := p.Engine.Current()
	if err := inv.Ensure(set.InventoryKinds(), set.Compiled.InventoryReads()); err != nil {
		var unserved *inventory.UnservedError
		if errors.As(err, &unserved) {
			return fmt.Errorf("--inventory: %w", err)
		}
		// Discovery did not answer: not a mistake in roles.yaml. The
		// webhook starts, and the kinds are asked for again each second.
		p.Logger.Warn("the inventory cannot resolve its kinds yet; retrying", "error", err.Error())
	}
	p.Registry.MustRegister(inv.Collectors()...)
	started := time.Now()
	var readyOnce atomic.Bool
	timeout := p.Options.Inventory.SyncTimeout
	p.Checks = append(p.Checks, health.Check{Name: "inventory",
		Ready: func() error {
			err := inv.Ready()
			switch {
			case err == nil:
				readyOnce.Store(true)
				return nil
			case readyOnce.Load() || time.Since(started) > timeout:
				// Past the first sync (a kind added by a reload) or its
				// timeout, the roles that read it answer by onError;
				// the webhook stays ready for every other role.
				return nil
			}
			return err
		},
		Strict: inv.Strict,
		Detail: inv.Detail,
	})
	p.Tasks = append(p.Tasks, Task{Name: "inventory", Run: inv.Run}, Task{Name: "inventory follows the policies", Run: func(ctx context.Context) error {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if current := p.Engine.Current(); current != nil && (current != set || inv.Missing()) {
				changed := current != set
				set = current
				if err := inv.Ensure(set.InventoryKinds(), set.Compiled.InventoryReads()); err != nil && changed {
					p.Logger.Error("the inventory cannot watch a kind the policies declare; policies that read it fail (onError) until it can", "revision", set.Revision, "error", err.Error())
				}
			}
		}
	}})
	return nil
}
