package leaninformer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// takingTransport hands the watch streams of a Runner's informers to them,
// as a member's transport does, and counts those it handed over.
type takingTransport struct {
	next  http.RoundTripper
	takes *atomic.Int32
	off   bool // hands nothing over: client-go reads every stream
}

func (t takingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || t.off {
		return resp, err
	}
	resp, taken := TakeWatch(req, resp)
	if taken {
		t.takes.Add(1)
	}
	return resp, nil
}

// streamServer is an HTTP/2 API server of ConfigMaps in namespace testNS
// that only watches: each watch request is answered by script, which
// writes the stream (protobuf or JSON, as the server is made) and ends it
// by returning.
type streamServer struct {
	srv    *httptest.Server
	json   bool
	script func(sw *streamWriter, n int, q url.Values)

	mu       sync.Mutex
	requests []url.Values
}

func newStreamServer(t *testing.T, asJSON bool, script func(sw *streamWriter, n int, q url.Values)) *streamServer {
	t.Helper()
	s := &streamServer{json: asJSON, script: script}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.EnableHTTP2 = true
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *streamServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("watch") != "true" {
		http.Error(w, "only watches here", http.StatusNotFound)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, q)
	n := len(s.requests)
	s.mu.Unlock()
	ct := "application/vnd.kubernetes.protobuf;stream=watch"
	if s.json {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), json: s.json, done: r.Context().Done()}
	sw.flush()
	s.script(sw, n, q)
}

func (s *streamServer) watches() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.requests...)
}

// client returns a ListerWatcher of ConfigMaps on the server, through a
// REST client as controller-runtime makes one for typed objects, whose
// transport hands the watch streams over unless off.
func (s *streamServer) client(t *testing.T, off bool) (toolscache.ListerWatcher, *atomic.Int32) {
	t.Helper()
	cfg := &rest.Config{
		Host:            s.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})},
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &corev1.SchemeGroupVersion,
			ContentType:          kruntime.ContentTypeProtobuf,
			NegotiatedSerializer: serializer.WithoutConversionCodecFactory{CodecFactory: serializer.NewCodecFactory(scheme.Scheme)},
		},
		APIPath: "/api",
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	takes := &atomic.Int32{}
	hc.Transport = takingTransport{next: hc.Transport, takes: takes, off: off}
	t.Cleanup(hc.CloseIdleConnections)
	rc, err := rest.RESTClientForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return toolscache.NewListWatchFromClient(rc, "configmaps", testNS, fields.Everything()), takes
}

// streamWriter writes one watch stream.
type streamWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	json bool
	done <-chan struct{} // the client went away
}

func (sw *streamWriter) flush() { _ = sw.rc.Flush() }

// write writes b and flushes it.
func (sw *streamWriter) write(b []byte) {
	_, _ = sw.w.Write(b)
	sw.flush()
}

// frame is the encoded event, framed.
func (sw *streamWriter) frame(typ watch.EventType, obj kruntime.Object) []byte {
	if sw.json {
		raw, err := json.Marshal(obj)
		if err != nil {
			panic(err)
		}
		ev, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: kruntime.RawExtension{Raw: raw}})
		if err != nil {
			panic(err)
		}
		return append(ev, '\n')
	}
	var raw bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &raw); err != nil {
		panic(err)
	}
	ev := metav1.WatchEvent{Type: string(typ), Object: kruntime.RawExtension{Raw: raw.Bytes()}}
	b, err := ev.Marshal()
	if err != nil {
		panic(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) //nolint:gosec // G115: a test's events are small
}

func (sw *streamWriter) event(typ watch.EventType, obj kruntime.Object) { sw.write(sw.frame(typ, obj)) }

// initial writes the initial events of a watch-list: an add of each object,
// then the bookmark that ends them, at rv.
func (sw *streamWriter) initial(rv string, objs ...*corev1.ConfigMap) {
	for _, o := range objs {
		sw.event(watch.Added, o)
	}
	sw.event(watch.Bookmark, &corev1.ConfigMap{
		TypeMeta:   configMapType,
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
	})
}

// hold keeps the stream open until the client goes away.
func (sw *streamWriter) hold() { <-sw.done }

var configMapType = metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}

func cm(name, rv string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: configMapType, ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, ResourceVersion: rv}, Data: data}
}

func statusObject(err apierrors.APIStatus) *metav1.Status {
	s := err.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	return &s
}

// streamInformer runs an informer of ConfigMaps of a Runner (whose Stop
// the test's cleanup waits for) on lw, with a recorder and an error log.
func streamInformer(t *testing.T, lw toolscache.ListerWatcher) (*Informer, *recorder, *errorLog, *Runner) {
	t.Helper()
	r := NewRunnerWithOptions(context.Background(), RunnerOptions{Scheme: scheme.Scheme})
	t.Cleanup(r.Stop)
	inf := r.New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{}).(*Informer)
	log := &errorLog{}
	if err := inf.SetWatchErrorHandlerWithContext(log.handler); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder("stream")
	rec.register(t, inf, nil)
	inf.RunWithContext(context.Background())
	return inf, rec, log, r
}

// goroutinesIn counts the goroutines whose stack names fn.
func goroutinesIn(fn string) int {
	count := 0
	for _, g := range goroutineStacks() {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// goroutineStacks returns the stack of every goroutine, each beginning
// with its header line ("goroutine 7 [chan receive]:").
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Split(string(buf), "\n\n")
}

// TestStreamReadHere: a Runner's informer whose transport hands it its
// watch stream reads it itself, protobuf and JSON: the initial list, then
// events that arrive a few bytes at a time or several in one write, with
// quotes, braces and escapes in their strings. While it waits, the watch
// costs one goroutine of this package and none of client-go's decoder.
func TestStreamReadHere(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json"}[asJSON], func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			tricky := map[string]string{"v": `a "quoted" {brace} [bracket] \ back\slash \" }`, "u": "é ✓"}
			more := make(chan struct{})
			srv := newStreamServer(t, asJSON, func(sw *streamWriter, n int, _ url.Values) {
				if n > 1 {
					sw.hold()
					return
				}
				sw.initial("3", cm("a", "1", tricky), cm("b", "2", nil))
				select {
				case <-more:
				case <-sw.done:
					return
				}
				// One event a few bytes at a time, then two in one write.
				f := sw.frame(watch.Modified, cm("a", "4", map[string]string{"v": "}{"}))
				for k := 0; k < len(f); k += 3 {
					sw.write(f[k:min(k+3, len(f))])
				}
				sw.write(append(sw.frame(watch.Added, cm("c", "5", tricky)), sw.frame(watch.Deleted, cm("b", "6", nil))...))
				sw.hold()
			})
			lw, takes := srv.client(t, false)
			inf, rec, log, r := streamInformer(t, lw)
			waitFor(t, 5*time.Second, "the informer to sync", inf.HasSynced)
			if got, _, _ := inf.GetStore().GetByKey(testNS + "/a"); got == nil || got.(*corev1.ConfigMap).Data["v"] != tricky["v"] {
				t.Errorf("stored %v, want data %v", got, tricky)
			}
			close(more)
			waitFor(t, 5*time.Second, "the handler to get every event", func() bool {
				return rec.matches(map[string]string{testNS + "/a": "4", testNS + "/c": "5"})
			})
			rec.noProblems(t)
			if got := takes.Load(); got != 1 {
				t.Errorf("%d streams handed over, want 1", got)
			}
			if errs, _ := log.snapshot(); len(errs) > 0 {
				t.Errorf("watch errors: %v", errs)
			}
			waitFor(t, 5*time.Second, "client-go's watch on the empty body to end", func() bool {
				return goroutinesIn("watch.(*StreamWatcher).receive") == 0
			})
			if got := goroutinesIn("leaninformer.(*streamWatch).receive"); got != 1 {
				t.Errorf("%d goroutines wait for the next event, want 1", got)
			}
			r.Stop()
			srv.srv.Close()
			leakcheck.VerifyNone(t, ignore)
		})
	}
}

// TestStreamCutMidFrame: a stream that ends in the middle of an event ends
// the watch as a dropped connection does: quietly, the half event is not
// delivered, and (after a whole event: a watch that ends without one
// within a second counts as failed) the watch is opened again from the
// last version seen, without a list; the event comes whole on the new
// watch.
func TestStreamCutMidFrame(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json"}[asJSON], func(t *testing.T) {
			srv := newStreamServer(t, asJSON, func(sw *streamWriter, n int, _ url.Values) {
				switch n {
				case 1:
					sw.initial("3", cm("a", "1", nil))
					sw.event(watch.Modified, cm("a", "4", nil))
					f := sw.frame(watch.Modified, cm("a", "5", map[string]string{"v": "half"}))
					sw.write(f[:len(f)/2])
				case 2:
					sw.event(watch.Modified, cm("a", "5", map[string]string{"v": "whole"}))
					sw.hold()
				default:
					sw.hold()
				}
			})
			lw, takes := srv.client(t, false)
			inf, rec, log, _ := streamInformer(t, lw)
			waitFor(t, 5*time.Second, "the event to come on the second watch", func() bool {
				return rec.matches(map[string]string{testNS + "/a": "5"})
			})
			rec.noProblems(t)
			if got, _, _ := inf.GetStore().GetByKey(testNS + "/a"); got.(*corev1.ConfigMap).Data["v"] != "whole" {
				t.Errorf("stored %v, want the whole event's", got)
			}
			w := srv.watches()
			if len(w) != 2 || w[1].Get("resourceVersion") != "4" || w[1].Get("sendInitialEvents") != "" {
				t.Errorf("watches %v, want a second one from version 4 without the initial events", w)
			}
			if errs, _ := log.snapshot(); len(errs) > 0 {
				t.Errorf("watch errors: %v", errs)
			}
			if got := takes.Load(); got != 2 {
				t.Errorf("%d streams handed over, want 2", got)
			}
		})
	}
}

// TestStreamEndsWithItsList: a watch-list whose stream ends right after
// the initial events, before the pump has taken the watch over from the
// list, ends there as any watch does: the informer syncs, and the watch is
// opened again (a list through it, since it ended within a second without
// an event), whose events reach the store.
func TestStreamEndsWithItsList(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json"}[asJSON], func(t *testing.T) {
			srv := newStreamServer(t, asJSON, func(sw *streamWriter, n int, _ url.Values) {
				switch n {
				case 1:
					sw.initial("3", cm("a", "1", nil)) // and the stream ends
				default:
					sw.initial("4", cm("a", "4", nil))
					sw.hold()
				}
			})
			lw, _ := srv.client(t, false)
			inf, rec, _, _ := streamInformer(t, lw)
			waitFor(t, 5*time.Second, "the informer to sync", inf.HasSynced)
			waitFor(t, 10*time.Second, "the second watch's events", func() bool {
				return rec.matches(map[string]string{testNS + "/a": "4"})
			})
			rec.noProblems(t)
		})
	}
}

// TestStreamErrorEvents: an error event (410 Expired, a 500) ends the
// watch as client-go's reflector ends it: a new list follows (here the
// streamed list of a watch-list), which replaces the store.
func TestStreamErrorEvents(t *testing.T) {
	for name, status := range map[string]*metav1.Status{
		"expired":  statusObject(apierrors.NewResourceExpired("too old resource version: 1 (3)")),
		"internal": statusObject(apierrors.NewInternalError(errTest)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newStreamServer(t, false, func(sw *streamWriter, n int, _ url.Values) {
				switch n {
				case 1:
					sw.initial("3", cm("a", "1", nil), cm("b", "2", nil))
					sw.event(watch.Error, status)
				case 2:
					sw.initial("7", cm("a", "5", nil))
					sw.hold()
				default:
					sw.hold()
				}
			})
			lw, _ := srv.client(t, false)
			inf, rec, _, _ := streamInformer(t, lw)
			waitFor(t, 10*time.Second, "the relist to replace the store", func() bool {
				return rec.matches(map[string]string{testNS + "/a": "5"}) && len(inf.GetStore().ListKeys()) == 1
			})
			w := srv.watches()
			if len(w) != 2 || w[1].Get("sendInitialEvents") != "true" {
				t.Errorf("watches %v, want a watch-list after the error", w)
			}
		})
	}
}

var errTest = errors.New("test failure")

// TestStreamLargeObjects: an object of a few MiB is read whole; an event
// announced larger than client-go reads (16 MiB) ends the watch with an
// error event, without the informer allocating for it, and a list
// follows.
func TestStreamLargeObjects(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	srv := newStreamServer(t, false, func(sw *streamWriter, n int, _ url.Values) {
		switch n {
		case 1:
			sw.initial("3", cm("a", "1", map[string]string{"big": big}))
			sw.write(binary.BigEndian.AppendUint32(nil, maxFrame+1))
			sw.hold()
		case 2:
			sw.initial("7", cm("a", "5", nil))
			sw.hold()
		default:
			sw.hold()
		}
	})
	lw, _ := srv.client(t, false)
	inf, rec, _, _ := streamInformer(t, lw)
	waitFor(t, 5*time.Second, "the large object", func() bool {
		got, _, _ := inf.GetStore().GetByKey(testNS + "/a")
		return got != nil && (got.(*corev1.ConfigMap).Data["big"] == big || got.(*corev1.ConfigMap).ResourceVersion == "5")
	})
	waitFor(t, 10*time.Second, "the relist after the event too large", func() bool {
		return rec.matches(map[string]string{testNS + "/a": "5"})
	})
	if w := srv.watches(); len(w) != 2 {
		t.Errorf("%d watches, want 2", len(w))
	}
	if s := rec.snapshot(); s.initial != 1 || s.updates != 1 {
		t.Errorf("%d initial adds and %d updates, want the large object, then its relist", s.initial, s.updates)
	}
}

// TestStreamStopMidFrame: an informer stopped while its reader waits in
// the middle of an event stops at once, and leaves no goroutine.
func TestStreamStopMidFrame(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json"}[asJSON], func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			srv := newStreamServer(t, asJSON, func(sw *streamWriter, _ int, _ url.Values) {
				sw.initial("3", cm("a", "1", nil))
				f := sw.frame(watch.Modified, cm("a", "4", nil))
				sw.write(f[:len(f)-5])
				sw.hold()
			})
			lw, _ := srv.client(t, false)
			inf, _, _, r := streamInformer(t, lw)
			waitFor(t, 5*time.Second, "the informer to sync", inf.HasSynced)
			time.Sleep(20 * time.Millisecond) // the reader is past the event's first bytes by now, or soon
			stopped := make(chan struct{})
			go func() {
				r.Stop()
				close(stopped)
			}()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("the Runner did not stop within 5s")
			}
			srv.srv.Close()
			leakcheck.VerifyNone(t, ignore)
		})
	}
}

// TestStreamOfWrappedWatch: a ListerWatcher that does something with
// client-go's watch (here, a filter) keeps its watch: the stream handed
// over is given back to client-go by opening the watch again, once, and
// every later watch is left to client-go; nothing is lost.
func TestStreamOfWrappedWatch(t *testing.T) {
	srv := newStreamServer(t, false, func(sw *streamWriter, n int, _ url.Values) {
		switch n {
		case 1:
			sw.initial("3", cm("lost", "1", nil))
			sw.hold()
		case 2:
			sw.initial("3", cm("a", "1", nil), cm("filtered", "2", nil))
			sw.hold()
		default:
			sw.hold()
		}
	})
	lw, takes := srv.client(t, false)
	filtered := &toolscache.ListWatch{
		ListWithContextFunc: lw.(*toolscache.ListWatch).ListWithContextFunc,
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.(toolscache.ListerWatcherWithContext).WatchWithContext(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				cm, ok := e.Object.(*corev1.ConfigMap)
				return e, !ok || cm.Name != "filtered"
			}), nil
		},
	}
	inf, rec, _, _ := streamInformer(t, filtered)
	// The informer's HasSynced says the store holds the list; the handler
	// has its events once its registration has synced.
	waitFor(t, 5*time.Second, "the handler to sync", rec.registration().HasSynced)
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != testNS+"/a" {
		t.Errorf("stored %v, want what the filtered watch delivers", keys)
	}
	if !rec.matches(map[string]string{testNS + "/a": "1"}) {
		t.Errorf("handler state %v", rec)
	}
	if got := takes.Load(); got != 1 {
		t.Errorf("%d streams handed over, want the first only", got)
	}
}

// TestStreamsOfControllerRuntimeCache: the informers of a
// controller-runtime cache on a real API server read their streams here,
// for each client the cache watches with: typed objects (protobuf), a
// CRD's objects unstructured (JSON, the dynamic client) and metadata-only
// objects (protobuf, the metadata client), which get their kind set as
// controller-runtime's own watch sets it. No client-go decoder is left
// running.
func TestStreamsOfControllerRuntimeCache(t *testing.T) {
	t.Parallel()
	f, err := test.Start(test.Options{}, "streams")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	})
	cfg := f.Cluster("streams").Config
	if err := test.InstallCRDObjects(cfg, test.OpenCRD("stream.mccr.dev", "Widget", true)); err != nil {
		t.Fatal(err)
	}
	const ns = "streams"
	widgetGVK := schema.GroupVersionKind{Group: "stream.mccr.dev", Version: "v1", Kind: "Widget"}
	admin, err := crclient.New(cfg, crclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	widget := func(name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetGroupVersionKind(widgetGVK)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	for _, o := range []crclient.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before"}, Data: map[string]string{"k": `"{v}"`}},
		widget("before", map[string]any{"text": `a "quoted" {brace}`}),
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	takes := &atomic.Int32{}
	hc.Transport = takingTransport{next: hc.Transport, takes: takes}
	t.Cleanup(hc.CloseIdleConnections)
	r := NewRunnerWithOptions(context.Background(), RunnerOptions{Scheme: scheme.Scheme})
	t.Cleanup(r.Stop)
	c, err := crcache.New(cfg, crcache.Options{HTTPClient: hc, Scheme: scheme.Scheme, NewInformer: r.New})
	if err != nil {
		t.Fatal(err)
	}
	cacheCtx, stopCache := context.WithCancel(context.Background())
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- c.Start(cacheCtx) }()
	t.Cleanup(func() {
		stopCache()
		if err := <-cacheDone; err != nil {
			t.Error(err)
		}
	})
	metaCM := &metav1.PartialObjectMetadata{}
	metaCM.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	uWidget := &unstructured.Unstructured{}
	uWidget.SetGroupVersionKind(widgetGVK)
	for _, o := range []crclient.Object{&corev1.ConfigMap{}, uWidget, metaCM} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatalf("informer of %T: %v", o, err)
		}
	}
	for _, o := range []crclient.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "after"}},
		widget("after", map[string]any{"n": int64(1)}),
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := func(name string) crclient.ObjectKey { return crclient.ObjectKey{Namespace: ns, Name: name} }
	waitFor(t, 10*time.Second, "the cache to hold what was created after its start", func() bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(widgetGVK)
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		return c.Get(ctx, key("after"), &corev1.ConfigMap{}) == nil && c.Get(ctx, key("after"), u) == nil && c.Get(ctx, key("after"), m) == nil
	})
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, key("before"), got); err != nil || got.Data["k"] != `"{v}"` {
		t.Errorf("typed ConfigMap %v (%v), want its data", got, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	if err := c.Get(ctx, key("before"), u); err != nil || u.Object["spec"].(map[string]any)["text"] != `a "quoted" {brace}` {
		t.Errorf("Widget %v (%v), want its spec", u, err)
	}
	// Objects straight from the metadata informer's store: the kind is the
	// watch's doing, not the cache reader's.
	mi, err := c.GetInformer(ctx, metaCM)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range mi.(toolscache.SharedIndexInformer).GetStore().List() {
		if gvk := o.(*metav1.PartialObjectMetadata).GroupVersionKind(); gvk.Kind != "ConfigMap" {
			t.Errorf("metadata-only object %s has kind %v, want ConfigMap", o.(*metav1.PartialObjectMetadata).Name, gvk)
		}
	}
	if n := takes.Load(); n < 3 {
		t.Errorf("%d streams handed over, want the three informers'", n)
	}
	waitFor(t, 5*time.Second, "client-go's watches on empty bodies to end", func() bool {
		return goroutinesIn("watch.(*StreamWatcher).receive") == 0
	})
}

// TestIdleStreamCost: an idle watch whose stream the informer reads costs,
// besides the HTTP/2 stream's goroutine, one goroutine, the reader waiting
// for the next event, and no client-go decoder. The heap and stacks it
// holds, less those of a watch read by client-go, are logged: the server
// runs in the test's process, and what it holds per watch, the same either
// way, varies by some KiB from run to run (under the race detector more
// than the difference), so they are not checked here; BenchmarkFleet
// measures them.
func TestIdleStreamCost(t *testing.T) {
	const n = 100
	objs := make([]*corev1.ConfigMap, 20)
	for k := range objs {
		objs[k] = cm(strconv.Itoa(k), "1", map[string]string{"v": strings.Repeat("x", 1500)})
	}
	measure := func(off bool) (heap, stack float64) {
		srv := newStreamServer(t, false, func(sw *streamWriter, _ int, _ url.Values) {
			sw.initial("3", objs...)
			sw.hold()
		})
		lw, _ := srv.client(t, off)
		r := NewRunnerWithOptions(context.Background(), RunnerOptions{Scheme: scheme.Scheme})
		before := memNow()
		infs := make([]toolscache.SharedIndexInformer, n)
		for k := range infs {
			infs[k] = r.New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
			infs[k].RunWithContext(context.Background())
		}
		for _, inf := range infs {
			waitFor(t, 30*time.Second, "every informer to sync", inf.HasSynced)
		}
		if !off {
			waitFor(t, 5*time.Second, "client-go's watches on empty bodies to end", func() bool {
				return goroutinesIn("watch.(*StreamWatcher).receive") == 0
			})
			if got := goroutinesIn("leaninformer.(*streamWatch).receive"); got != n {
				t.Errorf("%d readers wait for an event, want one per watch (%d)", got, n)
			}
		}
		after := memNow()
		r.Stop()
		srv.srv.Close()
		return float64(after.heap-before.heap) / n, float64(after.stack-before.stack) / n
	}
	// A first round warms up what the process keeps (pools, the test's
	// clients); the watches read here go before those read by client-go,
	// which a later round's leftovers would favour.
	measure(true)
	heap, stack := measure(false)
	cgHeap, cgStack := measure(true)
	t.Logf("per idle watch, with the server's share: read here %.0f B heap and %.0f B stack, by client-go %.0f B and %.0f B", heap, stack, cgHeap, cgStack)
}

type memReading struct {
	heap, stack uint64
	goroutines  int
}

func memNow() memReading {
	var m goruntime.MemStats
	for range 3 {
		goruntime.GC()
	}
	goruntime.ReadMemStats(&m)
	return memReading{heap: m.HeapAlloc, stack: m.StackInuse, goroutines: goruntime.NumGoroutine()}
}

// TestStreamHandOver: a stream watch whose initial events are read through
// its result channel hands the rest to the pump once the pump follows it,
// whenever that comes: after the stream has ended (the pump is told it
// ended), or while an event waits on the channel (the pump gets it, and
// each next once it asks); a watch stopped while an event waits on the
// channel closes the channel. None leaves a goroutine behind.
func TestStreamHandOver(t *testing.T) {
	sw := &streamWriter{json: true}
	open := func(t *testing.T) (*streamWatch, *io.PipeWriter) {
		t.Helper()
		pr, pw := io.Pipe()
		ts := typedFamily(scheme.Scheme).streamFor("application/json")
		ts.body = pr
		return newStreamWatch(ts, nil, klog.Background()), pw
	}
	write := func(pw *io.PipeWriter, rv string) {
		go func() { _, _ = pw.Write(sw.frame(watch.Modified, cm("a", rv, nil))) }()
	}
	receive := func(t *testing.T, w *streamWatch, rv string) {
		t.Helper()
		select {
		case e, ok := <-w.ResultChan():
			if !ok || e.Object.(*corev1.ConfigMap).ResourceVersion != rv {
				t.Fatalf("received %v (open %v), want version %s", e, ok, rv)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %s within 5s", rv)
		}
	}
	type handed struct {
		rv    string
		ended bool
	}
	follow := func(w *streamWatch) chan handed {
		got := make(chan handed, 4)
		w.follow(func(e watch.Event, ended bool) {
			h := handed{ended: ended}
			if !ended {
				h.rv = e.Object.(*corev1.ConfigMap).ResourceVersion
			}
			got <- h
		})
		return got
	}
	expect := func(t *testing.T, got chan handed, want handed) {
		t.Helper()
		select {
		case h := <-got:
			if h != want {
				t.Fatalf("handed %+v, want %+v", h, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing handed within 5s, want %+v", want)
		}
	}

	t.Run("ended before followed", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		w, pw := open(t)
		write(pw, "1")
		receive(t, w, "1")
		_ = pw.Close()
		waitFor(t, 5*time.Second, "the watch to end", closed(w.done))
		got := follow(w)
		expect(t, got, handed{ended: true})
		leakcheck.VerifyNone(t, ignore)
	})
	t.Run("followed while an event waits", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		w, pw := open(t)
		write(pw, "1")
		receive(t, w, "1")
		write(pw, "2")
		waitFor(t, 5*time.Second, "the next event to wait on the channel", func() bool {
			return goroutinesIn("leaninformer.(*streamWatch).hand") == 1
		})
		got := follow(w)
		expect(t, got, handed{rv: "2"})
		write(pw, "3")
		if n := goroutinesIn("leaninformer.(*streamWatch).receive"); n != 0 {
			t.Errorf("%d readers before the pump asked for the next event, want 0", n)
		}
		w.next()
		expect(t, got, handed{rv: "3"})
		w.next()
		_ = pw.Close()
		expect(t, got, handed{ended: true})
		if _, ok := <-w.ResultChan(); ok {
			t.Error("an event on the result channel after the pump followed the watch")
		}
		leakcheck.VerifyNone(t, ignore)
	})
	t.Run("stopped while an event waits", func(t *testing.T) {
		ignore := goleak.IgnoreCurrent()
		w, pw := open(t)
		write(pw, "1")
		waitFor(t, 5*time.Second, "the event to wait on the channel", func() bool {
			return goroutinesIn("leaninformer.(*streamWatch).hand") == 1
		})
		w.Stop()
		select {
		case e, ok := <-w.ResultChan():
			if ok {
				t.Errorf("received %v after Stop, want the channel closed", e)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the result channel still open 5s after Stop")
		}
		leakcheck.VerifyNone(t, ignore)
	})
}

// TestStopIsQuiet: stopping informers whose watch streams are open ends
// those streams (their requests are cut), and says nothing about it: no
// "watch ended with error" line, as client-go's reflector says nothing when
// it is stopped. Twenty informers of one Runner, stopped by its context, in
// several rounds: a stream cut before its pump has the stop used to be
// taken for a failed watch.
func TestStopIsQuiet(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "protobuf", true: "json"}[asJSON], func(t *testing.T) {
			srv := newStreamServer(t, asJSON, func(sw *streamWriter, _ int, _ url.Values) {
				sw.initial("3", cm("a", "1", nil))
				sw.hold()
			})
			lw, _ := srv.client(t, false)
			for round := range 5 {
				var (
					mu    sync.Mutex
					lines []string
				)
				logger := funcr.New(func(prefix, args string) {
					mu.Lock()
					defer mu.Unlock()
					lines = append(lines, prefix+" "+args)
				}, funcr.Options{})
				ctx, cancel := context.WithCancel(context.Background())
				r := NewRunnerWithOptions(ctx, RunnerOptions{Scheme: scheme.Scheme})
				infs := make([]*Informer, 20)
				for k := range infs {
					infs[k] = r.New(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{}).(*Informer)
					infs[k].RunWithContext(klog.NewContext(context.Background(), logger))
				}
				for _, inf := range infs {
					waitFor(t, 5*time.Second, "every informer to sync", inf.HasSynced)
				}
				cancel()
				for _, inf := range infs {
					waitFor(t, 5*time.Second, "the informers to stop", inf.IsStopped)
				}
				r.Stop()
				mu.Lock()
				for _, l := range lines {
					if strings.Contains(l, "watch ended") {
						t.Errorf("round %d: stopping logged %s", round, l)
					}
				}
				mu.Unlock()
			}
		})
	}
}
