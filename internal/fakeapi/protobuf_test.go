package fakeapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/test"
)

const (
	protobufType  = "application/vnd.kubernetes.protobuf"
	protobufWatch = protobufType + ";stream=watch"
)

// answer is what a recorder saw of one exchange.
type answer struct {
	url, accept, contentType string
}

// recorder keeps the Content-Type of every answer a client got.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

// record returns a copy of cfg whose clients report to a new recorder.
func record(cfg *rest.Config) (*rest.Config, *recorder) {
	rec := &recorder{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				rec.mu.Lock()
				rec.answers = append(rec.answers, answer{req.URL.String(), req.Header.Get("Accept"), resp.Header.Get("Content-Type")})
				rec.mu.Unlock()
			}
			return resp, err
		})
	})
	return cfg, rec
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// check fails t for each answer about resources whose Content-Type is not
// want (wantWatch for watches), and if there were none.
func (r *recorder) check(t *testing.T, who, want, wantWatch string) []answer {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var seen []answer
	for _, a := range r.answers {
		if !strings.Contains(a.url, "/api/v1/") {
			continue
		}
		seen = append(seen, a)
		w := want
		if strings.Contains(a.url, "watch=true") {
			w = wantWatch
		}
		if a.contentType != w {
			t.Errorf("%s: %s (Accept %q) answered %q, want %q", who, a.url, a.accept, a.contentType, w)
		}
	}
	if len(seen) == 0 {
		t.Errorf("%s: no requests for resources seen", who)
	}
	return seen
}

func clientsets(t *testing.T, s *fakeapi.Server) (pb, js *kubernetes.Clientset, pbRec, jsRec *recorder) {
	t.Helper()
	pbCfg, pbRec := record(s.Config())
	pbCfg.ContentType = runtime.ContentTypeProtobuf
	jsCfg, jsRec := record(s.Config())
	jsCfg.ContentType = runtime.ContentTypeJSON
	jsCfg.AcceptContentTypes = runtime.ContentTypeJSON
	var err error
	if pb, err = kubernetes.NewForConfig(pbCfg); err != nil {
		t.Fatal(err)
	}
	if js, err = kubernetes.NewForConfig(jsCfg); err != nil {
		t.Fatal(err)
	}
	return pb, js, pbRec, jsRec
}

// sameOrFail fails t unless the protobuf client saw what the JSON client
// did. The items of the server's JSON lists carry their apiVersion and
// kind, which a protobuf list has no place for (and a kube-apiserver's
// JSON lists leave out): those are not compared.
func sameOrFail(t *testing.T, what string, pb, js any) {
	t.Helper()
	if l, ok := js.(runtime.Object); ok && meta.IsListType(l) {
		l = l.DeepCopyObject()
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			return nil
		})
		js = l
	}
	if !apiequality.Semantic.DeepEqual(pb, js) {
		t.Fatalf("%s: the protobuf client saw\n%#v\nthe JSON client\n%#v", what, pb, js)
	}
}

// events reads n events from w, or fails t after a while.
func events(t *testing.T, w watch.Interface, n int) []watch.Event {
	t.Helper()
	defer w.Stop()
	var out []watch.Event
	timeout := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %d events, want %d: %v", len(out), n, out)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("%d events within 5s, want %d: %v", len(out), n, out)
		}
	}
	return out
}

// TestProtobufClientSeesWhatJSONSees: a typed clientset that asks for
// protobuf gets protobuf answers, watches included, and sees in them
// exactly what a JSON client sees: objects, lists, resumed watches,
// watch-lists, 410 Gone and the errors of failed requests.
func TestProtobufClientSeesWhatJSONSees(t *testing.T) {
	s := start(t, fakeapi.WithHistory(5))
	s.Seed(ns("a"), ns("b"), cm("a", "one", map[string]string{"app": "x"}), cm("b", "two", nil),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s"}, StringData: map[string]string{"p": "w"}})
	pb, js, pbRec, jsRec := clientsets(t, s)
	ctx := context.Background()

	// Lists and gets of each kind.
	pbCMs, err := pb.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jsCMs, err := js.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pbCMs.Items) != 2 || pbCMs.Items[0].Data["k"] != "v" || pbCMs.Items[0].UID == "" {
		t.Fatalf("protobuf list: %+v", pbCMs)
	}
	sameOrFail(t, "list of ConfigMaps", pbCMs, jsCMs)
	pbCM, err := pb.CoreV1().ConfigMaps("a").Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jsCM, err := js.CoreV1().ConfigMaps("a").Get(ctx, "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameOrFail(t, "a ConfigMap", pbCM, jsCM)
	if pbCM.CreationTimestamp.IsZero() || pbCM.Labels["app"] != "x" {
		t.Fatalf("protobuf get: %+v", pbCM)
	}
	pbSecrets, err := pb.CoreV1().Secrets("a").List(ctx, metav1.ListOptions{LabelSelector: ""})
	if err != nil {
		t.Fatal(err)
	}
	jsSecrets, err := js.CoreV1().Secrets("a").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameOrFail(t, "list of Secrets", pbSecrets, jsSecrets)
	if len(pbSecrets.Items) != 1 || string(pbSecrets.Items[0].Data["p"]) != "w" {
		t.Fatalf("protobuf secrets: %+v", pbSecrets)
	}
	pbNS, err := pb.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=a"})
	if err != nil {
		t.Fatal(err)
	}
	jsNS, err := js.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=a"})
	if err != nil {
		t.Fatal(err)
	}
	sameOrFail(t, "list of Namespaces", pbNS, jsNS)
	if len(pbNS.Items) != 1 || pbNS.Items[0].Status.Phase != corev1.NamespaceActive {
		t.Fatalf("protobuf namespaces: %+v", pbNS)
	}

	// Writes answer the written object; failures answer a Status the
	// client recognizes.
	created, err := pb.CoreV1().ConfigMaps("a").Create(ctx, cm("a", "w", nil), metav1.CreateOptions{})
	if err != nil || created.ResourceVersion == "" || created.Data["k"] != "v" {
		t.Fatalf("protobuf create: %+v, %v", created, err)
	}
	if _, err := pb.CoreV1().ConfigMaps("a").Create(ctx, cm("a", "w", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: want AlreadyExists, got %v", err)
	}
	if _, err := pb.CoreV1().ConfigMaps("a").Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get of a missing ConfigMap: want NotFound, got %v", err)
	}
	stale := created.DeepCopy()
	created.Data["k"] = "v2"
	if created, err = pb.CoreV1().ConfigMaps("a").Update(ctx, created, metav1.UpdateOptions{}); err != nil || created.Data["k"] != "v2" {
		t.Fatalf("protobuf update: %+v, %v", created, err)
	}
	if _, err := pb.CoreV1().ConfigMaps("a").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: want Conflict, got %v", err)
	}
	s.Forbid("secrets")
	if _, err := pb.CoreV1().Secrets("a").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("forbidden: got %v", err)
	}
	s.Permit("secrets")
	if err := pb.CoreV1().ConfigMaps("a").Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pb.CoreV1().ConfigMaps("b").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Seed(cm("b", "two", nil))

	// A watch resumed from a list's resourceVersion.
	from, err := js.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{ResourceVersion: from.ResourceVersion}
	pbW, err := pb.CoreV1().ConfigMaps("").Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	jsW, err := js.CoreV1().ConfigMaps("").Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CoreV1().ConfigMaps("a").Create(ctx, cm("a", "three", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	upd := pbCM.DeepCopy()
	upd.Data = map[string]string{"k": "changed"}
	if _, err := js.CoreV1().ConfigMaps("a").Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := js.CoreV1().ConfigMaps("a").Delete(ctx, "three", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pbEvents, jsEvents := events(t, pbW, 3), events(t, jsW, 3)
	sameOrFail(t, "resumed watch", pbEvents, jsEvents)
	if got := []watch.EventType{pbEvents[0].Type, pbEvents[1].Type, pbEvents[2].Type}; !slices.Equal(got, []watch.EventType{watch.Added, watch.Modified, watch.Deleted}) {
		t.Fatalf("resumed watch: events %v", got)
	}

	// A watch-list: the current objects, then the bookmark that ends them.
	wl := metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	if pbW, err = pb.CoreV1().ConfigMaps("").Watch(ctx, wl); err != nil {
		t.Fatal(err)
	}
	if jsW, err = js.CoreV1().ConfigMaps("").Watch(ctx, wl); err != nil {
		t.Fatal(err)
	}
	pbEvents, jsEvents = events(t, pbW, 3), events(t, jsW, 3)
	sameOrFail(t, "watch-list", pbEvents, jsEvents)
	if bm := pbEvents[2]; bm.Type != watch.Bookmark || bm.Object.(*corev1.ConfigMap).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("watch-list: last event %s %+v, want the initial-events-end bookmark", bm.Type, bm.Object)
	}

	// Once the history is gone, 410.
	for i := range 12 {
		if _, err := js.CoreV1().ConfigMaps("a").Create(ctx, cm("a", fmt.Sprint("n", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if pbW, err = pb.CoreV1().ConfigMaps("").Watch(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if jsW, err = js.CoreV1().ConfigMaps("").Watch(ctx, opts); err != nil {
		t.Fatal(err)
	}
	pbEvents, jsEvents = events(t, pbW, 1), events(t, jsW, 1)
	sameOrFail(t, "watch from a compacted resourceVersion", pbEvents, jsEvents)
	if ev := pbEvents[0]; ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("watch from a compacted resourceVersion: got %s %+v", ev.Type, ev.Object)
	}

	seen := pbRec.check(t, "protobuf client", protobufType, protobufWatch)
	jsRec.check(t, "JSON client", runtime.ContentTypeJSON, runtime.ContentTypeJSON)
	if !slices.ContainsFunc(seen, func(a answer) bool { return strings.Contains(a.url, "sendInitialEvents=true") }) {
		t.Error("no watch-list request seen")
	}
}

// TestProtobufInformerAndCache: a client-go informer (which lists by
// watch-list) and a controller-runtime cache, both speaking protobuf as
// they do for built-in types, sync and follow changes.
func TestProtobufInformerAndCache(t *testing.T) {
	s := start(t)
	s.Seed(ns("a"), cm("a", "one", nil), cm("a", "two", map[string]string{"app": "x"}))
	pb, js, pbRec, _ := clientsets(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	factory := informers.NewSharedInformerFactory(pb, 0)
	inf := factory.Core().V1().ConfigMaps()
	inf.Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	if _, err := js.CoreV1().ConfigMaps("a").Create(ctx, cm("a", "three", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the informer sees the new ConfigMap", func() bool {
		_, err := inf.Lister().ConfigMaps("a").Get("three")
		return err == nil
	})
	want, err := js.CoreV1().ConfigMaps("a").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached := toolscache.MetaNamespaceKeyFunc
	for _, w := range want.Items {
		key, _ := cached(&w)
		got, ok, err := inf.Informer().GetStore().GetByKey(key)
		if err != nil || !ok {
			t.Fatalf("informer lacks %s: %v", key, err)
		}
		w.TypeMeta = got.(*corev1.ConfigMap).TypeMeta
		sameOrFail(t, "informer's "+key, got, &w)
	}
	seen := pbRec.check(t, "informer", protobufType, protobufWatch)
	if !slices.ContainsFunc(seen, func(a answer) bool { return strings.Contains(a.url, "sendInitialEvents=true") }) {
		t.Error("the informer did not watch-list")
	}

	// controller-runtime's cache asks for protobuf for ConfigMaps
	// because its config leaves ContentType empty.
	ccfg, ccRec := record(s.Config())
	c, err := cache.New(ccfg, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "two"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["app"] != "x" || got.UID == "" {
		t.Fatalf("cached ConfigMap: %+v", got)
	}
	list := &corev1.ConfigMapList{}
	if err := c.List(ctx, list, client.MatchingLabels{"app": "x"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("cached list: %v, %d items", err, len(list.Items))
	}
	if err := c.List(ctx, list, client.InNamespace("a")); err != nil || len(list.Items) != 3 {
		t.Fatalf("cached list: %v, %d items", err, len(list.Items))
	}
	seen = ccRec.check(t, "controller-runtime cache", protobufType, protobufWatch)
	if !slices.ContainsFunc(seen, func(a answer) bool { return strings.Contains(a.url, "watch=true") }) {
		t.Error("the cache did not watch")
	}
}

// TestDynamicClientGetsJSON: clients that ask for JSON, like the dynamic
// client, get JSON as before.
func TestDynamicClientGetsJSON(t *testing.T) {
	s := start(t)
	s.Seed(cm("a", "one", nil))
	cfg, rec := record(s.Config())
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res := corev1.SchemeGroupVersion.WithResource("configmaps")
	l, err := dc.Resource(res).Namespace("a").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].GetName() != "one" {
		t.Fatalf("dynamic list: %v, %+v", err, l)
	}
	u, err := dc.Resource(res).Namespace("a").Get(ctx, "one", metav1.GetOptions{})
	if err != nil || u.GetKind() != "ConfigMap" || u.Object["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("dynamic get: %v, %+v", err, u)
	}
	if _, err := dc.Resource(res).Namespace("a").Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dynamic get of a missing object: %v", err)
	}
	w, err := dc.Resource(res).Namespace("a").Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := events(t, w, 1)[0]; ev.Type != watch.Added {
		t.Fatalf("dynamic watch: %s %+v", ev.Type, ev.Object)
	}
	rec.check(t, "dynamic client", runtime.ContentTypeJSON, runtime.ContentTypeJSON)
}

// TestAnswersLikeAKubeAPIServer sends the same requests, with the Accept
// headers clients send, to a kube-apiserver and to the fake, and compares
// what comes back: status, Content-Type, and the envelope of each object
// or watch event (the protobuf magic and runtime.Unknown's apiVersion and
// kind, or JSON's), for a get, a missing object's Status, a list, a
// watch-list and a watch resumed from a resourceVersion. (A fresh
// kube-apiserver still has its whole history, so the 410 of a watch from
// too far back is compared with a JSON client's instead, in
// TestProtobufClientSeesWhatJSONSees.)
func TestAnswersLikeAKubeAPIServer(t *testing.T) {
	fleet := test.NewFleet(t, test.Options{}, "real")
	kube := fleet.Clusters[0].Config
	s := start(t)
	// "a" holds one ConfigMap for the whole test, "b" a new one for each
	// resumed watch.
	s.Seed(ns("a"), ns("b"), cm("a", "one", nil))
	ctx := context.Background()
	rc, err := kubernetes.NewForConfig(kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := rc.CoreV1().Namespaces().Create(ctx, ns(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rc.CoreV1().ConfigMaps("a").Create(ctx, cm("a", "one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	servers := []struct {
		name string
		cfg  *rest.Config
		c    kubernetes.Interface
	}{{"kube-apiserver", kube, rc}, {"fakeapi", s.Config(), nil}}
	if servers[1].c, err = kubernetes.NewForConfig(servers[1].cfg); err != nil {
		t.Fatal(err)
	}
	const cms = "/api/v1/namespaces/a/configmaps"
	for i, accept := range []string{
		"",
		"application/json",
		"application/json, */*",
		"*/*",
		"application/vnd.kubernetes.protobuf, */*",
		"application/vnd.kubernetes.protobuf,application/json",
		"application/json;q=0.5, application/vnd.kubernetes.protobuf",
		"application/vnd.kubernetes.protobuf;q=0.5, application/json",
		"application/vnd.kubernetes.protobuf;stream=watch, application/json",
	} {
		var got [2][]string
		for j, srv := range servers {
			hc, err := rest.HTTPClientFor(srv.cfg)
			if err != nil {
				t.Fatal(err)
			}
			from, err := srv.c.CoreV1().ConfigMaps("b").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.c.CoreV1().ConfigMaps("b").Create(ctx, cm("b", fmt.Sprint("n", i), nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, rq := range []struct {
				path   string
				events int
			}{
				{cms + "/one", 0},
				{cms + "/missing", 0},
				{cms, 0},
				{cms + "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", 2},
				{"/api/v1/namespaces/b/configmaps?watch=true&resourceVersion=" + from.ResourceVersion, 1},
			} {
				got[j] = append(got[j], strings.Split(rq.path, "&")[0]+": "+describe(t, hc, strings.TrimSuffix(srv.cfg.Host, "/")+rq.path, accept, rq.events))
			}
			hc.CloseIdleConnections()
		}
		for k := range got[0] {
			if got[0][k] != got[1][k] {
				t.Errorf("Accept %q:\nkube-apiserver: %s\nfakeapi:        %s", accept, got[0][k], got[1][k])
			}
		}
		t.Logf("Accept %q:\n%s", accept, strings.Join(got[1], "\n"))
	}
}

// describe gets url with Accept accept and says what came back: status,
// Content-Type and the envelopes of the object, or of a watch's first
// events.
func describe(t *testing.T, hc *http.Client, url, accept string, events int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	out := fmt.Sprintf("%d %s", resp.StatusCode, ct)
	r := bufio.NewReader(resp.Body)
	switch ct {
	case protobufWatch:
		for {
			var n [4]byte
			if _, err := io.ReadFull(r, n[:]); err != nil {
				t.Fatalf("%s: reading a frame: %v", url, err)
			}
			b := make([]byte, binary.BigEndian.Uint32(n[:]))
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatalf("%s: reading a frame: %v", url, err)
			}
			var ev metav1.WatchEvent
			if err := ev.Unmarshal(b); err != nil {
				t.Fatalf("%s: decoding a watch event: %v", url, err)
			}
			out += fmt.Sprintf(" | %s %s", ev.Type, protobufEnvelope(t, ev.Object.Raw))
			if events--; events == 0 {
				return out
			}
		}
	case runtime.ContentTypeJSON:
		if events == 0 {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return out + " " + jsonEnvelope(t, b)
		}
		dec := json.NewDecoder(r)
		for {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				t.Fatalf("%s: decoding a watch event: %v", url, err)
			}
			out += fmt.Sprintf(" | %s %s", ev.Type, jsonEnvelope(t, ev.Object))
			if events--; events == 0 {
				return out
			}
		}
	case protobufType:
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return out + " " + protobufEnvelope(t, b)
	}
	return out
}

func protobufEnvelope(t *testing.T, b []byte) string {
	t.Helper()
	rest, ok := bytes.CutPrefix(b, []byte("k8s\x00"))
	if !ok {
		return fmt.Sprintf("no protobuf magic: %q", b)
	}
	var u runtime.Unknown
	if err := u.Unmarshal(rest); err != nil {
		return fmt.Sprintf("no runtime.Unknown: %v", err)
	}
	return fmt.Sprintf("protobuf %s/%s (encoding %q, type %q)", u.APIVersion, u.Kind, u.ContentEncoding, u.ContentType)
}

func jsonEnvelope(t *testing.T, b []byte) string {
	t.Helper()
	var tm metav1.TypeMeta
	if err := json.Unmarshal(b, &tm); err != nil {
		return fmt.Sprintf("not JSON: %v", err)
	}
	return fmt.Sprintf("JSON %s/%s", tm.APIVersion, tm.Kind)
}
