package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantumnode/qn-admission/policies"
	"github.com/quantumnode/qn-admission/policies/window"
	"github.com/quantumnode/qn-admission/webhook"
)

// Which webhooks an evaluation asks.
const (
	// webhookBoth asks the mutating webhook, then the validating webhook
	// with the patched object, as the apiserver does.
	webhookBoth = "both"
	// webhookValidate asks only the validating webhook.
	webhookValidate = "validate"
	// webhookMutate asks only the mutating webhook.
	webhookMutate = "mutate"
)

var webhookModes = []string{webhookBoth, webhookValidate, webhookMutate}

// evalRequest is one evaluation: a review, the webhooks to ask, the time
// and the simulated window state.
type evalRequest struct {
	Review      []byte
	Webhook     string
	Now         time.Time
	WindowCount int
	Explain     bool
	// Inventory is what policies read as data.inventory (--inventory).
	Inventory policies.Inventory
}

// webhookAnswer is one webhook's answer.
type webhookAnswer struct {
	// Webhook is "mutate" or "validate".
	Webhook  string
	Request  *admissionv1.AdmissionRequest
	Review   *admissionv1.AdmissionReview
	Decision policies.Decision
	// Wire is the response body exactly as qn-webhook writes it.
	Wire []byte
	// Now is the time the request was judged at.
	Now time.Time
	// Explanation is set when asked for and the request reached the engine.
	Explanation *policies.Explanation
	// ByKind is set when the request's kind has a Decider of its own
	// (a HorizontalQNScaler's query check) and the policies did not judge.
	ByKind bool
}

// outcome is what the webhooks answered for one evaluation.
type outcome struct {
	// Source names the object judged (file, document, list item).
	Source   string
	Mutate   *webhookAnswer
	Validate *webhookAnswer
	// Patched is the object after the mutating webhook's patch: what the
	// validating webhook judged and the apiserver would store.
	Patched []byte
}

// final is the answer that decides: the validating webhook's when it ran,
// else the mutating webhook's.
func (o *outcome) final() *webhookAnswer {
	if o.Validate != nil {
		return o.Validate
	}
	return o.Mutate
}

// evaluate asks the webhooks the way the apiserver does, through the
// server's own decoding (webhook.DecodeReview) and answer
// (webhook.Answer) with an engine over set. Errors are bad input.
func evaluate(ctx context.Context, set *policies.Set, r evalRequest) (*outcome, error) {
	rev, err := webhook.DecodeReview(r.Review)
	if err != nil {
		return nil, err
	}
	engine := policies.NewEngine(set, policies.EngineOptions{Windows: newPrefilledStore(r.Now, r.WindowCount), Inventory: r.Inventory})
	return askWebhooks(ctx, newExplainingDecider(engine, r.Explain), rev.Request, r.Webhook, r.Now)
}

// askWebhooks asks d's webhooks about req at now as the apiserver does:
// the mutating webhook, then the validating webhook with the patched
// object (or only the one webhook asks for).
func askWebhooks(ctx context.Context, d *explainingDecider, req *admissionv1.AdmissionRequest, webhook string, now time.Time) (*outcome, error) {
	var err error
	out := &outcome{}
	if webhook != webhookValidate {
		out.Mutate, err = d.answer(ctx, req, policies.PathMutate, now)
		if err != nil {
			return nil, err
		}
		if !out.Mutate.Decision.Allowed || webhook == webhookMutate {
			// The apiserver stops at a denial; mutate-only stops here.
			out.Patched, err = patched(req.Object.Raw, out.Mutate.Decision.Patch)
			return out, err
		}
		raw, err := patched(req.Object.Raw, out.Mutate.Decision.Patch)
		if err != nil {
			return nil, err
		}
		if len(out.Mutate.Decision.Patch) > 0 {
			copied := *req
			copied.Object = runtime.RawExtension{Raw: raw}
			req = &copied
		}
		out.Patched = raw
	}
	out.Validate, err = d.answer(ctx, req, policies.PathValidate, now)
	if err != nil {
		return nil, err
	}
	if out.Patched == nil {
		out.Patched = req.Object.Raw
	}
	return out, nil
}

// patched applies a webhook's JSONPatch to the object.
func patched(object, patch []byte) ([]byte, error) {
	if len(patch) == 0 || len(bytes.TrimSpace(object)) == 0 {
		return object, nil
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("decode the mutating webhook's patch %s: %w", patch, err)
	}
	out, err := p.Apply(object)
	if err != nil {
		return nil, fmt.Errorf("apply the mutating webhook's patch %s: %w", patch, err)
	}
	return out, nil
}

// explainingDecider is qn-webhook's Decider (webhook.Served over the
// engine) as webhook.Answer sees it; when asked, it explains each request
// the engine judges first. Explain only peeks at the window, so the
// explanation is of the very decision the engine then makes.
type explainingDecider struct {
	engine  *policies.Engine
	served  webhook.ByKind
	explain bool
	// byKind is set when the last request went to the Decider of its
	// kind (a HorizontalQNScaler's query check), not to the policies.
	byKind bool
	// noWire skips encoding the response body (impact compares decisions).
	noWire bool
	// objects, when set, supplies each request's decoded objects, so a
	// request asked of several deciders is decoded once (impact).
	objects func(*admissionv1.AdmissionRequest) (webhook.Objects, error)
	last    *policies.Explanation
	err     error
}

func newExplainingDecider(engine *policies.Engine, explain bool) *explainingDecider {
	return &explainingDecider{engine: engine, served: webhook.Served(engine), explain: explain}
}

// ofKind is the Decider of in's kind, when its kind has one of its own.
func (d *explainingDecider) ofKind(in *policies.Input) (webhook.Decider, bool) {
	k := in.Facts.Kind
	dk, ok := d.served.Kinds[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
	d.byKind = ok
	return dk, ok
}

// Validate implements webhook.Decider.
func (d *explainingDecider) Validate(ctx context.Context, in *policies.Input) policies.Decision {
	if dk, ok := d.ofKind(in); ok {
		return dk.Validate(ctx, in)
	}
	if d.explain {
		d.last, d.err = d.engine.Explain(ctx, in, policies.PathValidate)
	}
	return d.engine.Validate(ctx, in)
}

// Mutate implements webhook.Decider.
func (d *explainingDecider) Mutate(ctx context.Context, in *policies.Input) policies.Decision {
	if dk, ok := d.ofKind(in); ok {
		return dk.Mutate(ctx, in)
	}
	if d.explain {
		d.last, d.err = d.engine.Explain(ctx, in, policies.PathMutate)
	}
	return d.engine.Mutate(ctx, in)
}

func (d *explainingDecider) answer(ctx context.Context, req *admissionv1.AdmissionRequest, path policies.Path, now time.Time) (*webhookAnswer, error) {
	d.last, d.err, d.byKind = nil, nil, false
	var rev *admissionv1.AdmissionReview
	var dec policies.Decision
	if objs, ok := d.decodedObjects(req); ok {
		rev, _, dec = webhook.AnswerObjects(ctx, d, req, objs, path, now)
	} else {
		rev, _, dec = webhook.Answer(ctx, d, req, path, now)
	}
	if d.err != nil {
		return nil, fmt.Errorf("explain: %w", d.err)
	}
	// The server writes the review with encoding/json; so does qnctl, so
	// the bytes are the server's.
	var wire []byte
	if !d.noWire {
		var err error
		if wire, err = json.Marshal(rev); err != nil {
			return nil, fmt.Errorf("encode answer: %w", err)
		}
	}
	return &webhookAnswer{Webhook: path.String(), Request: req, Review: rev, Decision: dec, Wire: wire, Now: now, Explanation: d.last, ByKind: d.byKind}, nil
}

// decodedObjects are req's objects from d.objects, when it is set and
// they decode; else Answer decodes them (and says what is malformed).
func (d *explainingDecider) decodedObjects(req *admissionv1.AdmissionRequest) (webhook.Objects, bool) {
	if d.objects == nil {
		return webhook.Objects{}, false
	}
	objs, err := d.objects(req)
	return objs, err == nil
}

// prefilledStore is the server's in-process window store with every key
// already holding n changes made at the evaluation time: --window-count.
// It reads the time from a fixed clock, so a full window frees its first
// slot exactly one period after --time. Like the MemoryStore it fills, it
// answers the engine itself (window.Counter): it cannot fail to answer,
// and no deadline may cut filling a large window short.
type prefilledStore struct {
	mem    *window.MemoryStore
	n      int
	mu     sync.Mutex
	filled map[string]bool
}

func newPrefilledStore(now time.Time, n int) *prefilledStore {
	return &prefilledStore{mem: window.NewMemoryStore(fixedClock(now), window.MemoryOptions{}), n: n, filled: map[string]bool{}}
}

func (s *prefilledStore) fill(ctx context.Context, key string, limit window.Limit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.filled[key] {
		return nil
	}
	s.filled[key] = true
	for i := range min(s.n, limit.Count) {
		if _, err := s.mem.Take(ctx, key, limit, fmt.Sprintf("qnctl-window-%d", i)); err != nil {
			return err
		}
	}
	return nil
}

// PeekWith implements window.Counter.
func (s *prefilledStore) PeekWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit) (window.Answer, error) {
	if err := s.fill(ctx, key, limit); err != nil {
		return window.Answer{}, err
	}
	return s.mem.PeekWith(ctx, onErr, key, limit)
}

// TakeWith implements window.Counter.
func (s *prefilledStore) TakeWith(ctx context.Context, onErr window.OnStoreError, key string, limit window.Limit, uid string) (window.Answer, error) {
	if err := s.fill(ctx, key, limit); err != nil {
		return window.Answer{}, err
	}
	return s.mem.TakeWith(ctx, onErr, key, limit, uid)
}

// Release implements window.Counter.
func (s *prefilledStore) Release(ctx context.Context, key string, r window.Receipt) error {
	return s.mem.Release(ctx, key, r)
}

// fixedClock is a clock.PassiveClock that always reads one instant.
type fixedClock time.Time

// Now implements clock.PassiveClock.
func (c fixedClock) Now() time.Time { return time.Time(c) }

// Since implements clock.PassiveClock.
func (c fixedClock) Since(t time.Time) time.Duration { return time.Time(c).Sub(t) }
