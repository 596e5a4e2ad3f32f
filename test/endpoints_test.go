package test_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/test"
)

func TestEndpointsReachTheirBackendThroughAPortOfTheirOwn(t *testing.T) {
	ctx := t.Context()
	ns := test.NamespaceName(t)
	fleet.CreateNamespace(t, ns)
	for _, c := range fleet.Clusters {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: ns}, Data: map[string]string{"cluster": c.Name}}
		if err := c.AdminClient(t).Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 6)
	for i := range names {
		names[i] = fmt.Sprintf("%s-ep-%d", ns, i)
	}
	eps := test.NewEndpoints(t, fleet, nil, names...)
	addrs := map[string]bool{}
	for i, e := range eps {
		if want := fleet.Clusters[i%len(fleet.Clusters)]; e.Backend != want {
			t.Errorf("endpoint %s in front of %s, want %s (round robin)", e.Name, e.Backend.Name, want.Name)
		}
		if addrs[e.Address] || e.Config.Host != "https://"+e.Address || e.Config.Host == e.Backend.Config.Host {
			t.Errorf("endpoint %s: address %s, host %s: want a loopback address of its own", e.Name, e.Address, e.Config.Host)
		}
		addrs[e.Address] = true
		if fleet.Endpoint(e.Name) != e {
			t.Errorf("Endpoint(%q) is not the endpoint added", e.Name)
		}

		// Through the endpoint's kubeconfig, as a FileWatcher reads it.
		ncs, err := config.LoadConfigsFromConfigFile(e.KubeconfigPath)
		if err != nil || len(ncs) != 1 || ncs[0].Name != e.Name {
			t.Fatalf("kubeconfig of %s: %v, %v", e.Name, ncs, err)
		}
		cl, err := client.New(ncs[0].Config, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var got corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "owner"}, &got); err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		if got.Data["cluster"] != e.Backend.Name {
			t.Errorf("endpoint %s reached cluster %s, want %s", e.Name, got.Data["cluster"], e.Backend.Name)
		}
		accepted, _, err := e.Connections()
		if err != nil || accepted < 1 {
			t.Errorf("endpoint %s: %d connections accepted, %v; want the client's", e.Name, accepted, err)
		}
	}
	// Endpoints in front of the same API server differ in their TLS
	// settings too.
	if bytes.Equal(eps[0].Config.CAData, eps[len(fleet.Clusters)].Config.CAData) {
		t.Errorf("endpoints %s and %s have the same CA bundle", eps[0].Name, eps[len(fleet.Clusters)].Name)
	}
	if raw, err := clientcmd.LoadFromFile(eps[0].KubeconfigPath); err != nil || raw.CurrentContext != eps[0].Name {
		t.Errorf("kubeconfig %s: %v", eps[0].KubeconfigPath, err)
	}
}

func TestEndpointNamesAreUniqueAcrossClustersAndEndpoints(t *testing.T) {
	name := test.NamespaceName(t)
	if _, err := fleet.AddEndpoints(nil, name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := fleet.RemoveEndpoint(name); err != nil {
			t.Error(err)
		}
	}()
	for _, names := range [][]string{{name}, {"one"}, {"x-" + name, "x-" + name}, {""}} {
		if _, err := fleet.AddEndpoints(nil, names...); err == nil {
			t.Errorf("AddEndpoints(%q) succeeded", names)
		}
	}
	if _, err := fleet.Add(name); err == nil {
		t.Errorf("Add(%q), an endpoint's name, succeeded", name)
	}
	if fleet.Endpoint("x-"+name) != nil {
		t.Error("a refused AddEndpoints left an endpoint behind")
	}
}

func TestRemovedEndpointRefusesConnections(t *testing.T) {
	ctx := t.Context()
	name := test.NamespaceName(t)
	eps, err := fleet.AddEndpoints([]*test.Cluster{fleet.Cluster("two")}, name)
	if err != nil {
		t.Fatal(err)
	}
	e := eps[0]
	cl, err := client.New(e.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Name: "default"}
	if err := cl.Get(ctx, key, &corev1.Namespace{}); err != nil {
		t.Fatal(err)
	}
	if _, open, err := e.Connections(); err != nil || open < 1 {
		t.Fatalf("open connections: %d, %v; want the client's", open, err)
	}
	if err := fleet.RemoveEndpoint(name); err != nil {
		t.Fatal(err)
	}
	if fleet.Endpoint(name) != nil {
		t.Error("Endpoint finds a removed endpoint")
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cl.Get(short, key, &corev1.Namespace{}); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("Get through a removed endpoint: %v, want a connection error", err)
	}
	if err := fleet.RemoveEndpoint(name); err == nil {
		t.Error("second RemoveEndpoint succeeded")
	}
}
