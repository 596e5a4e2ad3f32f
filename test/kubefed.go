package test

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
)

// kubeFedScheme holds what JoinKubeFed writes to a host.
var kubeFedScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(kubefedv1beta1.AddToScheme(s))
	return s
}()

// KubeFedJoin is a member cluster joined to a KubeFed host by JoinKubeFed:
// the two objects `kubefedctl join` leaves on the host. A test may change
// them through any client (labels, status) and must then keep the pointers
// current, as a client's Update does.
type KubeFedJoin struct {
	// Secret holds the member's token under "token" and its CA
	// certificates under "ca.crt". Its name is generated from the
	// cluster's, as kubefedctl does.
	Secret *corev1.Secret
	// Cluster names the member's API endpoint, its CA bundle and Secret.
	Cluster *kubefedv1beta1.KubeFedCluster

	host client.Client
}

// JoinKubeFed joins a member cluster to the KubeFed host at host, under the
// name name in namespace, the way `kubefedctl join` does it minus KubeFed's
// own RBAC: a Secret holding token and the member's CA, then a
// KubeFedCluster naming the member's endpoint, its CA bundle and that
// Secret. The order matters to a watcher of KubeFedClusters: a cluster
// whose Secret is there already is complete as soon as it appears. Code
// that reads KubeFed's clusters can so be tested against what a real join
// writes, not against objects a test made up.
//
// The host needs KubeFed's CRDs (see KubeFedCRDPath); namespace is created
// if missing. member is what the KubeFedCluster points to; only its address
// and CA are used, token is the credential (ServiceAccountToken mints one
// as kubefedctl does). An empty token writes a Secret without one, as the
// Secret of a join looks until its token is filled in (RotateToken does).
//
// If the KubeFedCluster cannot be created, the Secret is deleted again.
func JoinKubeFed(ctx context.Context, host *rest.Config, namespace, name string, member *rest.Config, token string) (*KubeFedJoin, error) {
	hc, err := client.New(host, client.Options{Scheme: kubeFedScheme})
	if err != nil {
		return nil, fmt.Errorf("test: joining %s to KubeFed: %w", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := hc.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("test: joining %s to KubeFed: creating namespace %s: %w", name, namespace, err)
	}
	j := &KubeFedJoin{host: hc}
	j.Secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: name + "-"},
		Data:       map[string][]byte{},
	}
	if token != "" {
		j.Secret.Data["token"] = []byte(token)
	}
	if len(member.CAData) > 0 {
		j.Secret.Data["ca.crt"] = member.CAData
	}
	if err := hc.Create(ctx, j.Secret); err != nil {
		return nil, fmt.Errorf("test: joining %s to KubeFed: creating its Secret: %w", name, err)
	}
	j.Cluster = &kubefedv1beta1.KubeFedCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kubefedv1beta1.KubeFedClusterSpec{
			APIEndpoint: member.Host,
			CABundle:    member.CAData,
			SecretRef:   kubefedv1beta1.LocalSecretReference{Name: j.Secret.Name},
		},
	}
	if err := hc.Create(ctx, j.Cluster); err != nil {
		err = fmt.Errorf("test: joining %s to KubeFed: creating its KubeFedCluster: %w", name, err)
		return nil, errors.Join(err, client.IgnoreNotFound(hc.Delete(ctx, j.Secret)))
	}
	return j, nil
}

// RotateToken replaces the token in the join's Secret, the way an operator
// rotates a member's credentials: the KubeFedCluster stays as it is, and
// whoever reads the cluster must notice the Secret changed. Only the token
// is patched, so other changes a test made to the Secret are kept.
func (j *KubeFedJoin) RotateToken(ctx context.Context, token string) error {
	before := j.Secret.DeepCopy()
	if j.Secret.Data == nil {
		j.Secret.Data = map[string][]byte{}
	}
	j.Secret.Data["token"] = []byte(token)
	if err := j.host.Patch(ctx, j.Secret, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("test: rotating the token of KubeFed cluster %s: %w", j.Cluster.Name, err)
	}
	return nil
}

// Unjoin removes the member from KubeFed in the order `kubefedctl unjoin`
// uses: the Secret first, then the KubeFedCluster. A watcher so sees, for a
// moment, a KubeFedCluster whose Secret is gone, as it does in a real
// unjoin, and must not report that as an error. Whatever is already gone is
// no error, so Unjoin also serves as a test's cleanup.
func (j *KubeFedJoin) Unjoin(ctx context.Context) error {
	if err := j.host.Delete(ctx, j.Secret); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("test: unjoining KubeFed cluster %s: deleting its Secret: %w", j.Cluster.Name, err)
	}
	if err := j.host.Delete(ctx, j.Cluster); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("test: unjoining KubeFed cluster %s: deleting its KubeFedCluster: %w", j.Cluster.Name, err)
	}
	return nil
}
