package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// codecs decodes request bodies in the encodings clients send: JSON, and
// protobuf from controller-runtime's typed client.
var codecs = func() serializer.CodecFactory {
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(sch)
}()

// resource serves /api/v1/[namespaces/{ns}/]{resource}[/{name}], in the
// format the request's Accept header negotiates.
func (s *Server) resource(w http.ResponseWriter, r *http.Request, parts []string) {
	var ns, name string
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 2 {
		name = parts[1]
	}
	k := kindFor(parts[0])
	if k == nil || len(parts) > 2 || (!k.namespaced && ns != "") || (k.namespaced && ns == "" && name != "") {
		writeError(w, r, apierrors.NewNotFound(corev1.Resource(parts[0]), name))
		return
	}
	fm := negotiate(r.Header.Get("Accept"))
	q := r.URL.Query()
	verb := verbOf(r.Method, name != "", q.Get("watch") == "true" || q.Get("watch") == "1")
	if verb == "" {
		writeError(w, r, apierrors.NewMethodNotSupported(k.gr(), r.Method))
		return
	}
	if s.isForbidden(k.resource) {
		writeError(w, r, apierrors.NewForbidden(k.gr(), name,
			fmt.Errorf("User %q cannot %s resource %q in API group \"\"", "fakeapi", verb, k.resource))) //nolint:staticcheck // ST1005: kube-apiserver's own wording
		return
	}
	f, err := parseFilter(ns, q)
	if err != nil {
		writeError(w, r, err)
		return
	}

	var body []byte
	var e entry
	code := http.StatusOK
	switch verb {
	case "watch":
		s.watch(w, r, k, f, fm)
		return
	case "list":
		body = s.list(k, f, fm)
	case "create":
		code = http.StatusCreated
		e, err = s.createFrom(r, k, ns)
		body = e.in(fm)
	case "update", "patch":
		e, err = s.updateFrom(r, k, ns, name, verb == "patch")
		body = e.in(fm)
	case "deletecollection":
		s.mu.Lock()
		for _, e := range s.selected(k, f) {
			s.remove(k, e)
		}
		s.mu.Unlock()
		body = fm.encode(success(k, "", ""))
	default: // get, delete
		s.mu.Lock()
		e, ok := s.get(k, ns, name)
		if ok && verb == "delete" {
			s.remove(k, e)
		}
		s.mu.Unlock()
		switch {
		case !ok:
			err = apierrors.NewNotFound(k.gr(), name)
		case verb == "delete":
			body = fm.encode(success(k, name, e.obj.GetUID()))
		default:
			body = e.in(fm)
		}
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeAs(w, code, fm, body)
}

// verbOf names a request the way RBAC does.
func verbOf(method string, named, watching bool) string {
	if named {
		return map[string]string{"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
	}
	if method == http.MethodGet && watching {
		return "watch"
	}
	return map[string]string{"GET": "list", "POST": "create", "DELETE": "deletecollection"}[method]
}

// success is what a real server answers to a delete of these kinds.
func success(k *kind, name string, uid types.UID) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: name, Kind: k.resource, UID: uid},
	}
}

// list encodes the k objects f selects as a list in fm, from the
// encodings stored with them.
func (s *Server) list(k *kind, f filter, fm format) []byte {
	s.mu.Lock()
	entries, rv := s.selected(k, f), strconv.FormatUint(s.rv, 10)
	s.mu.Unlock()
	if fm == formatProtobuf {
		items := make([][]byte, len(entries))
		for i, e := range entries {
			items[i] = e.pb
		}
		return protobufList(k.kind+"List", rv, items)
	}
	l := struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []runtime.RawExtension `json:"items"`
	}{
		TypeMeta: metav1.TypeMeta{Kind: k.kind + "List", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: rv},
		Items:    make([]runtime.RawExtension, len(entries)),
	}
	for i, e := range entries {
		l.Items[i].Raw = e.raw
	}
	return mustJSON(l)
}

func (s *Server) createFrom(r *http.Request, k *kind, ns string) (entry, error) {
	obj, err := decodeBody(r, k, ns)
	if err != nil {
		return entry{}, err
	}
	if obj.GetResourceVersion() != "" {
		return entry{}, badRequest("resourceVersion should not be set on objects to be created")
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(obj.GetGenerateName() + utilrand.String(5))
	}
	if obj.GetName() == "" {
		return entry{}, apierrors.NewInvalid(k.gvk().GroupKind(), "", field.ErrorList{
			field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.create(k, obj)
}

// updateFrom serves update (PUT) and patch. A patch applies to the stored
// JSON under the lock, so that no other write comes in between.
func (s *Server) updateFrom(r *http.Request, k *kind, ns, name string, patch bool) (entry, error) {
	var obj object
	var p []byte
	var err error
	if patch {
		p, err = io.ReadAll(r.Body)
	} else {
		obj, err = decodeBody(r, k, ns)
	}
	if err != nil {
		return entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.get(k, ns, name)
	if !ok {
		return entry{}, apierrors.NewNotFound(k.gr(), name)
	}
	if patch {
		if obj, err = applyPatch(r.Header.Get("Content-Type"), k, cur.raw, p); err != nil {
			return entry{}, err
		}
	}
	if obj.GetName() != name || obj.GetNamespace() != ns {
		return entry{}, badRequest("the name or namespace of the object (%s/%s) does not match the URL (%s/%s)",
			obj.GetNamespace(), obj.GetName(), ns, name)
	}
	return s.replace(k, cur, obj)
}

func applyPatch(contentType string, k *kind, cur, p []byte) (object, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	var patched []byte
	var err error
	switch types.PatchType(mt) {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(cur, p)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(cur, p, k.new())
	case types.JSONPatchType:
		var jp jsonpatch.Patch
		if jp, err = jsonpatch.DecodePatch(p); err == nil {
			patched, err = jp.Apply(cur)
		}
	default: // server-side apply among others
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", k.gr(), "",
			fmt.Sprintf("unsupported patch type %q", mt), 0, false)
	}
	if err != nil {
		return nil, badRequest("applying patch: %v", err)
	}
	obj := k.new()
	if err := json.Unmarshal(patched, obj); err != nil {
		return nil, badRequest("decoding patched object: %v", err)
	}
	return obj, nil
}

// decodeBody decodes a create or update body into a k in the namespace of
// the URL.
func decodeBody(r *http.Request, k *kind, ns string) (object, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, badRequest("reading body: %v", err)
	}
	gvk := k.gvk()
	got, _, err := codecs.UniversalDeserializer().Decode(b, &gvk, k.new())
	if err != nil {
		return nil, badRequest("decoding body: %v", err)
	}
	obj, ok := got.(object)
	if !ok || kindOf(obj) != k {
		return nil, badRequest("expected a %s, got %T", k.kind, got)
	}
	switch {
	case !k.namespaced:
		obj.SetNamespace("")
	case obj.GetNamespace() == "":
		obj.SetNamespace(ns)
	case obj.GetNamespace() != ns:
		return nil, badRequest("the namespace of the object (%s) does not match the namespace of the URL (%s)", obj.GetNamespace(), ns)
	}
	return obj, nil
}

// watch streams events as client-go's watch decoder reads them: one
// metav1.WatchEvent after another in a chunked 200 answer, flushed as they
// come, in fm: JSON, one a line, or protobuf, each after its length. It
// ends when the client goes away, timeoutSeconds pass or the server
// closes.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, k *kind, f filter, fm format) {
	q := r.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	if initial && !s.watchList {
		writeError(w, r, apierrors.NewInvalid(metav1.SchemeGroupVersion.WithKind("ListOptions").GroupKind(), "", field.ErrorList{
			field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")}))
		return
	}
	var timeout <-chan time.Time
	if secs, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && secs > 0 {
		t := time.NewTimer(time.Duration(secs) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	wt, gone, err := s.subscribe(k, f, q.Get("resourceVersion"), initial, fm)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", fm.contentType(true))
	w.WriteHeader(http.StatusOK)
	if wt == nil {
		_, _ = w.Write(gone)
		return
	}
	defer s.unsubscribe(wt)
	rc := http.NewResponseController(w)
	for {
		for _, fr := range wt.take() {
			if _, err := w.Write(fr); err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-wt.wake:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-timeout:
			return
		}
	}
}
