package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// replayed is one recorded request to judge under both policy sets.
type replayed struct {
	// Source says where it was recorded (file:line, a review file).
	Source string
	// Time is when the apiserver received it: rules that read the time,
	// and the rate windows, see this instant.
	Time    time.Time
	Request *admissionv1.AdmissionRequest
	// Recorded is the answer the cluster gave (admitted or refused by a
	// webhook), when the record says.
	Recorded *bool
}

// inputReport says what one input held and what of it was judged.
type inputReport struct {
	// Kind is "audit log", "snapshot", "cluster", "reviews" or
	// "decision log".
	Kind   string `json:"kind"`
	Source string `json:"source"`
	// Judged counts the requests (or stored objects) judged under both sets.
	Judged int `json:"judged"`
	// Skipped counts what was not judged, by a sentence saying why.
	Skipped map[string]int `json:"skipped,omitempty"`
	// RecordedDiffers counts requests whose recorded answer (admitted or
	// refused) differs from the base set's.
	RecordedDiffers int `json:"recordedDiffers,omitempty"`
}

func (r *inputReport) skip(why string) {
	if r.Skipped == nil {
		r.Skipped = map[string]int{}
	}
	r.Skipped[why]++
}

// Why audit events are not replayed: each is counted in the report.
const (
	skipMetadataLevel = "recorded at Metadata level, without the object (the audit policy must log QuantumNodes at Request or RequestResponse level)"
	skipRefusedBefore = "refused before the validating webhooks ran"
	skipNoOldObject   = "an UPDATE or DELETE of an object whose earlier state is not in the log (it was written before the log begins)"
	skipCollection    = "deletecollection (the log does not say which objects it deleted)"
	skipPatch         = "a patch that cannot be applied to the recorded object"
	skipUndecodable   = "a line that is not an audit.k8s.io/v1 Event"
	skipNoObject      = "a write whose object the log does not hold"
)

// auditLogReplay turns a kube-apiserver audit log into the admission
// requests its QuantumNode writes made, in the order the log holds them.
// An UPDATE's and a DELETE's oldObject is the object as the log last
// recorded it, so every write must be in the log from the object's
// creation on; objects written before the log begins are counted, not
// guessed.
type auditLogReplay struct {
	// stored holds each QuantumNode as last recorded, by namespace/name.
	stored map[string][]byte
	// last is the time of the latest event replayed: events are written
	// when they complete, so one received earlier may follow a later one;
	// replay time never goes backwards.
	last time.Time
	// namespace, when set, is the only namespace replayed.
	namespace string
}

func newAuditLogReplay(namespace string) *auditLogReplay {
	return &auditLogReplay{stored: map[string][]byte{}, namespace: namespace}
}

// maxAuditLine bounds one line of an audit log: an event holds at most a
// request and a response object, each under the apiserver's 3 MiB limit.
const maxAuditLine = 8 << 20

// read replays one audit log file, calling judge for each QuantumNode
// write that reached the validating webhooks.
func (a *auditLogReplay) read(name string, r io.Reader, report *inputReport, judge func(replayed) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	for line := 1; ; line++ {
		raw, err := readLine(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(raw, &ev); err != nil || ev.Kind != "Event" || !strings.HasPrefix(ev.APIVersion, "audit.k8s.io/") {
			report.skip(skipUndecodable)
			continue
		}
		rep, why := a.event(&ev)
		if why != "" {
			if why != skipOther {
				report.skip(why)
			}
			continue
		}
		rep.Source = fmt.Sprintf("%s:%d", name, line)
		report.Judged++
		if err := judge(rep); err != nil {
			return err
		}
	}
}

// readLine reads one line of any length up to maxAuditLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		part, err := br.ReadSlice('\n')
		buf = append(buf, part...)
		if len(buf) > maxAuditLine {
			return nil, fmt.Errorf("a line longer than %d MiB is no audit event", maxAuditLine>>20)
		}
		switch err {
		case nil:
			return buf, nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(buf) > 0 {
				return buf, nil
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// skipOther marks events that are none of the log's QuantumNode writes
// (other resources, reads, earlier stages): not counted.
const skipOther = "-"

// event turns one audit event into the request the validating webhook
// judged, or says why it is not replayed. It also follows the stored
// state of every QuantumNode the log writes, status writes included.
func (a *auditLogReplay) event(ev *auditv1.Event) (replayed, string) {
	ref := ev.ObjectRef
	if ev.Stage != auditv1.StageResponseComplete || ref == nil || ref.APIGroup != quantumNodes.Group || ref.Resource != quantumNodes.Resource ||
		(a.namespace != "" && ref.Namespace != a.namespace) {
		return replayed{}, skipOther
	}
	var op admissionv1.Operation
	switch ev.Verb {
	case "create":
		op = admissionv1.Create
	case "update", "patch":
		op = admissionv1.Update
	case "delete":
		op = admissionv1.Delete
	case "deletecollection":
		return replayed{}, skipCollection
	default:
		return replayed{}, skipOther
	}
	if ev.Level == auditv1.LevelMetadata || ev.Level == auditv1.LevelNone {
		return replayed{}, skipMetadataLevel
	}
	key := ref.Namespace + "/" + ref.Name
	if op == admissionv1.Create {
		key = ref.Namespace + "/" + nameOf(ev)
	}
	old := a.stored[key]
	code := int32(0)
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	succeeded := code >= 200 && code < 300
	dryRun := isDryRun(ev.RequestURI)
	object, why := a.object(ev, op, old)
	if succeeded && !dryRun {
		defer a.record(key, ev, op, object)
	}
	if ref.Subresource != "" {
		return replayed{}, skipOther // status and scale writes: not judged by the webhooks
	}
	if !succeeded && !refusedByWebhook(ev) {
		return replayed{}, skipRefusedBefore
	}
	if why != "" {
		return replayed{}, why
	}
	if op != admissionv1.Create && old == nil {
		return replayed{}, skipNoOldObject
	}
	user := ev.User
	if ev.ImpersonatedUser != nil {
		user = *ev.ImpersonatedUser
	}
	version := ref.APIVersion
	gvk := metav1.GroupVersionKind{Group: ref.APIGroup, Version: version, Kind: "QuantumNode"}
	gvr := metav1.GroupVersionResource{Group: ref.APIGroup, Version: version, Resource: ref.Resource}
	_, name, _ := strings.Cut(key, "/")
	req := &admissionv1.AdmissionRequest{
		UID: ev.AuditID, Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
		Name: name, Namespace: ref.Namespace, Operation: op, UserInfo: user, DryRun: &dryRun,
	}
	if op != admissionv1.Delete {
		req.Object = runtime.RawExtension{Raw: object}
	}
	if op != admissionv1.Create {
		req.OldObject = runtime.RawExtension{Raw: old}
	}
	t := ev.RequestReceivedTimestamp.Time
	if t.Before(a.last) {
		t = a.last
	}
	a.last = t
	admitted := succeeded
	return replayed{Time: t, Request: req, Recorded: &admitted}, ""
}

// nameOf is the name a create gave its object (generateName included).
func nameOf(ev *auditv1.Event) string {
	if ev.ObjectRef.Name != "" {
		return ev.ObjectRef.Name
	}
	for _, u := range []*runtime.Unknown{ev.ResponseObject, ev.RequestObject} {
		if u == nil {
			continue
		}
		var m struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if json.Unmarshal(u.Raw, &m) == nil && m.Metadata.Name != "" {
			return m.Metadata.Name
		}
	}
	return ""
}

// object is the object a write asks to store: the request's object for a
// create or update, the stored object with the patch applied for a patch
// (a JSON patch, else a merge patch; server-side apply is taken as a
// merge patch when the log has no result to read instead).
func (a *auditLogReplay) object(ev *auditv1.Event, op admissionv1.Operation, old []byte) ([]byte, string) {
	if op == admissionv1.Delete {
		return nil, ""
	}
	if ev.RequestObject == nil || len(ev.RequestObject.Raw) == 0 {
		return nil, skipNoObject
	}
	body := ev.RequestObject.Raw
	if ev.Verb != "patch" {
		return withMetadata(body, ev.ObjectRef.Namespace), ""
	}
	if old == nil {
		return nil, skipNoOldObject
	}
	var out []byte
	var err error
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(t); err == nil {
			out, err = p.Apply(old)
		}
	} else {
		out, err = jsonpatch.MergePatch(old, body)
	}
	if err != nil {
		if ev.ResponseObject != nil && isObject(ev.ResponseObject.Raw) {
			return ev.ResponseObject.Raw, ""
		}
		return nil, skipPatch
	}
	return out, ""
}

// withMetadata sets the object's namespace from the request's path, as
// the apiserver does before admission.
func withMetadata(obj []byte, namespace string) []byte {
	var m map[string]any
	if decodeKeepingNumbers(obj, &m) != nil {
		return obj
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil || meta["namespace"] == namespace {
		return obj
	}
	meta["namespace"] = namespace
	if out, err := json.Marshal(m); err == nil {
		return out
	}
	return obj
}

// record follows the stored state after a write that succeeded: the
// response's object when the log has it, else the object written.
func (a *auditLogReplay) record(key string, ev *auditv1.Event, op admissionv1.Operation, object []byte) {
	var resp []byte
	if ev.ResponseObject != nil && isObject(ev.ResponseObject.Raw) {
		resp = ev.ResponseObject.Raw
	}
	if op == admissionv1.Delete {
		// A node held by finalizers stays, marked for deletion.
		if resp != nil && bytes.Contains(resp, []byte(`"deletionTimestamp"`)) {
			a.stored[key] = resp
		} else {
			delete(a.stored, key)
		}
		return
	}
	switch {
	case resp != nil:
		a.stored[key] = resp
	case object != nil && ev.ObjectRef.Subresource == "":
		a.stored[key] = object
	case object != nil && ev.ObjectRef.Subresource == "status" && a.stored[key] != nil:
		// A status write stores only the status.
		var obj, cur map[string]any
		if decodeKeepingNumbers(object, &obj) == nil && decodeKeepingNumbers(a.stored[key], &cur) == nil {
			cur["status"] = obj["status"]
			if out, err := json.Marshal(cur); err == nil {
				a.stored[key] = out
			}
		}
	}
}

// decodeKeepingNumbers decodes JSON with every number as written, so an
// object re-encoded after an edit keeps its digits.
func decodeKeepingNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// isObject says raw is a QuantumNode (not a Status).
func isObject(raw []byte) bool {
	var tm typeMeta
	return json.Unmarshal(raw, &tm) == nil && tm.Kind == "QuantumNode"
}

// refusedByWebhook says an admission webhook refused the request: the
// validating webhooks ran (a refusal by RBAC, the schema or a conflict
// came before them, or without them).
func refusedByWebhook(ev *auditv1.Event) bool {
	if ev.Annotations["authorization.k8s.io/decision"] == "forbid" {
		return false
	}
	s := ev.ResponseStatus
	if s == nil || s.Code == http.StatusNotFound || s.Code == http.StatusConflict || s.Code == http.StatusUnprocessableEntity {
		return false
	}
	return strings.Contains(s.Message, "admission webhook") && strings.Contains(s.Message, "denied the request")
}

// isDryRun reads dryRun=All from the request's URI.
func isDryRun(requestURI string) bool {
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return false
	}
	for _, v := range u.Query()["dryRun"] {
		if v == "All" {
			return true
		}
	}
	return false
}

// openAuditLog opens one --audit-log file ("-" is stdin).
func openAuditLog(name string, stdin io.Reader) (io.ReadCloser, string, error) {
	if name == "-" {
		if stdin == nil {
			return nil, "", fmt.Errorf("stdin (-) is not available here; name a file")
		}
		return io.NopCloser(stdin), "stdin", nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, "", fmt.Errorf("--audit-log %s: %w", name, unwrapPathError(err))
	}
	return f, name, nil
}
