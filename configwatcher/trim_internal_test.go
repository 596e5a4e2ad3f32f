package configwatcher

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestKubeFedCacheHoldsNoOtherCredentials: a Secret made with kubectl
// apply in KubeFed's namespace (a webhook's serving certificate, say)
// carries its whole data in last-applied-configuration; the watcher
// caches every Secret there, so none keeps an annotation, nor data but the
// token and CA it reads.
func TestKubeFedCacheHoldsNoOtherCredentials(t *testing.T) {
	const key = "UFJJVkFURS1LRVktU0VDUkVU"
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-federation-system", Name: "webhook-cert",
			Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","data":{"tls.key":"` + key + `"},"kind":"Secret"}`,
				"other-tool/copy": key,
			},
		},
		Data: map[string][]byte{"tls.key": []byte("PRIVATE-KEY"), kubeFedTokenKey: []byte("t"), kubeFedCAKey: []byte("ca")},
	}
	out, err := kubeFedTransform(s)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*corev1.Secret)
	if !ok {
		t.Fatalf("transform returned %T", out)
	}
	if len(got.Annotations) != 0 {
		t.Errorf("the cached Secret keeps annotations %v", got.Annotations)
	}
	if _, kept := got.Data["tls.key"]; kept || len(got.Data) != 2 {
		t.Errorf("the cached Secret keeps data %v", got.Data)
	}
}

// TestLeavingSaysWhenGetIsRefused: without the right to get a Cluster,
// the watcher cannot tell one the host already deleted from one that stays
// when its Secret goes first; it says so, once.
func TestLeavingSaysWhenGetIsRefused(t *testing.T) {
	live := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "cluster.x-k8s.io", Resource: "clusters"}, key.Name, nil)
		},
	}).Build()
	var lines []string
	log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})
	h := &hostCache{live: live, log: log, ctx: context.Background()}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	u.SetKind("Cluster")
	u.SetNamespace("ns")
	u.SetName("gone")
	for range 3 {
		if h.leaving(u) {
			t.Fatal("a Cluster the host would not show counts as leaving")
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "grant get") || !strings.Contains(lines[0], "ns/gone") {
		t.Errorf("lines %q, want one naming the object and the right to grant", lines)
	}
}
