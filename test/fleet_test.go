package test_test

import (
	"context"
	"errors"
	"os"
	"strings"
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

// One fleet serves every test in this package; starting API servers is the
// expensive part.
var fleet *test.Fleet

func TestMain(m *testing.M) {
	if os.Getenv(helperFleetEnv) != "" {
		helperFleet()
		return
	}
	crds, err := test.KubeFedCRDPath()
	if err != nil {
		panic(err)
	}
	test.Main(m, &fleet, test.Options{CRDPaths: []string{crds}}, "one", "two", "three")
}

func TestEachClusterHoldsOnlyItsOwnObjects(t *testing.T) {
	ctx := t.Context()
	for _, c := range fleet.Clusters {
		cl, err := c.Client(client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"},
			Data:       map[string]string{"cluster": c.Name},
		}
		if err := cl.Create(ctx, cm); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	for _, c := range fleet.Clusters {
		cl, _ := c.Client(client.Options{})
		var got corev1.ConfigMap
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "owner"}, &got); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if got.Data["cluster"] != c.Name {
			t.Errorf("cluster %s holds %q's object", c.Name, got.Data["cluster"])
		}
		var list corev1.ConfigMapList
		if err := cl.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		owners := 0
		for _, item := range list.Items {
			if item.Name == "owner" {
				owners++
			}
		}
		if owners != 1 {
			t.Errorf("cluster %s: %d objects named owner, want 1", c.Name, owners)
		}
	}
}

func TestKubeconfigFilesReachTheirCluster(t *testing.T) {
	for _, c := range fleet.Clusters {
		raw, err := clientcmd.LoadFromFile(c.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if raw.CurrentContext != c.Name || raw.Contexts[c.Name] == nil {
			t.Fatalf("%s: kubeconfig context is %q", c.KubeconfigPath, raw.CurrentContext)
		}
		cfg, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(cfg, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Get(t.Context(), client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
			t.Errorf("%s via %s: %v", c.Name, c.KubeconfigPath, err)
		}
		if c.Named.Name != c.Name || c.Named.Source != (config.Source{File: c.KubeconfigPath, Context: c.Name}) {
			t.Errorf("NamedConfig = %v", c.Named)
		}
	}
}

func TestKubeFedCRDsInstalled(t *testing.T) {
	cl, _ := fleet.Clusters[0].Client(client.Options{})
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(kubefedClusterListGVK)
	if err := cl.List(t.Context(), &list); err != nil {
		t.Fatalf("listing KubeFedClusters: %v", err)
	}
}

func TestAPIServerStopAndStartKeepsData(t *testing.T) {
	c := fleet.Cluster("three")
	cl, _ := c.Client(client.Options{})
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := cl.Get(short, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	cancel()
	if err == nil {
		t.Fatal("Get succeeded while the API server was down")
	}
	start, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.StartAPIServer(start); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	// Twice, to cover stopping a server the kit restarted itself.
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAPIServer(start); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); apierrors.IsNotFound(err) || err != nil {
		t.Fatalf("after second restart: %v", err)
	}
}

func TestMissingBinariesNameTheMakeTarget(t *testing.T) {
	_, err := test.Start(test.Options{BinaryAssetsDirectory: t.TempDir()}, "x")
	if !errors.Is(err, test.ErrBinariesMissing) {
		t.Fatalf("err = %v, want ErrBinariesMissing", err)
	}
	if want := "make kubebins"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not mention %q", err, want)
	}
}
