package server_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// writeLosingGateway is a gateway in front of a member's API server, as a
// load balancer or an API gateway stands there: it passes everything on,
// but answers each create of a ConfigMap in namespace ns, once the API
// server has applied it, with 503 and Retry-After, as a gateway whose
// upstream connection broke before the answer does.
type writeLosingGateway struct {
	*httptest.Server
	lost atomic.Int64 // creates applied whose answer was replaced
}

func newWriteLosingGateway(t *testing.T, member *rest.Config, ns string) *writeLosingGateway {
	t.Helper()
	backend, err := url.Parse(member.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(member)
	if err != nil {
		t.Fatal(err)
	}
	g := &writeLosingGateway{}
	creates := "/api/v1/namespaces/" + ns + "/configmaps"
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.Transport = rt
	proxy.FlushInterval = -1 // watches stream
	proxy.ModifyResponse = func(res *http.Response) error {
		r := res.Request
		if r.Method != http.MethodPost || r.URL.Path != creates || res.StatusCode != http.StatusCreated {
			return nil
		}
		g.lost.Add(1)
		_ = res.Body.Close()
		res.StatusCode, res.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
		res.Header = http.Header{"Retry-After": {"1"}, "Content-Type": {"text/plain"}}
		res.Body = http.NoBody
		res.ContentLength = 0
		return nil
	}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Authorization") // the gateway's own credentials go on
		proxy.ServeHTTP(w, r)
	}))
	g.StartTLS()
	t.Cleanup(func() {
		g.CloseClientConnections() // the members' watches end, not wait
		g.Close()
	})
	return g
}

// config is how a member reaches the API server through the gateway.
func (g *writeLosingGateway) config() *rest.Config {
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.Certificate().Raw})
	return &rest.Config{Host: g.URL, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
}

// TestWriteLostBehindAGatewayIsSentOnce: a member behind a gateway that
// answers a create the API server applied with 503 and Retry-After. The
// fan-out client's Create returns ErrOutcomeUnknown (the write may have
// been applied: read before retrying), and the API server got the create
// once: neither client-go nor mccr sent it again, which for a
// generateName create would have made a second object. The create goes to
// a namespace the server's caches do not see, so that the reconciler's own
// writes (its "-ack" ConfigMaps) neither pass the gateway's trap nor count.
func TestWriteLostBehindAGatewayIsSentOnce(t *testing.T) {
	ns, lostNS := testNamespace(t), testNamespace(t)
	r := startServer(t, ns, nil)
	gw := newWriteLosingGateway(t, fleet.Cluster("m1").Config, lostNS)
	if err := r.srv.Add(config.NewNamedConfig("gated", gw.config())); err != nil {
		t.Fatal(err)
	}
	waitReady(t, r.srv, "gated")

	ctx, cancel := context.WithTimeout(known.WithCluster(t.Context(), "gated"), 30*time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: lostNS, GenerateName: "lost-"}}
	err := r.srv.GetClient().Create(ctx, cm)
	if !errors.Is(err, server.ErrOutcomeUnknown) {
		t.Errorf("Create answered 503 by the gateway after it was applied: %v; want ErrOutcomeUnknown", err)
	}
	if n := gw.lost.Load(); n != 1 {
		t.Errorf("the create reached the API server %d times; want once", n)
	}
	var list corev1.ConfigMapList
	if err := adminClient(t, "m1").List(t.Context(), &list, crclient.InNamespace(lostNS)); err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, item := range list.Items {
		if item.GenerateName == "lost-" {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d ConfigMaps made by one Create; want 1", made)
	}
	if err := r.srv.Delete("gated"); err != nil {
		t.Fatal(err)
	}
}
