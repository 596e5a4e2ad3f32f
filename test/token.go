package test

import (
	"context"
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/internal/conntrack"
)

// adminClientset returns a clientset for cfg whose connections close, call
// done, when the caller is finished. A clientset built from a config the
// usual way shares client-go's process-wide transport cache, which keeps
// connections open after the call returns, and opens a new one whenever its
// entry was garbage-collected in between: a test checking that nothing
// else is left open (goleak) would find the helper's connection.
func adminClientset(cfg *rest.Config) (cs *kubernetes.Clientset, done func(), err error) {
	tracked, conns := conntrack.Wrap(cfg)
	cs, err = kubernetes.NewForConfig(tracked)
	if err != nil {
		conns.Close()
		return nil, nil, err
	}
	return cs, conns.Close, nil
}

// ServiceAccountToken returns a bearer token for the ServiceAccount name in
// namespace, creating on the way whatever is missing: the namespace, the
// ServiceAccount, and a ClusterRoleBinding (see AdminBindingName) that makes
// it cluster-admin. cfg must reach the cluster as an administrator, as
// Cluster.Config does.
//
// The token comes from the TokenRequest API, signed by the API server (which
// envtest sets up with a signing key), the way a real cluster hands out
// tokens; it is what KubeFed's join stores in a member's Secret. Each call
// mints a new token, so calling it again rotates the credential; earlier
// tokens keep working until they expire (an hour, the API server's default)
// or DeleteServiceAccount revokes them all. It leaves no connection open.
func ServiceAccountToken(ctx context.Context, cfg *rest.Config, namespace, name string) (string, error) {
	cs, done, err := adminClientset(cfg)
	if err != nil {
		return "", fmt.Errorf("test: token for %s/%s: %w", namespace, name, err)
	}
	defer done()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("test: creating namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("test: creating ServiceAccount %s/%s: %w", namespace, name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AdminBindingName(namespace, name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("test: binding ServiceAccount %s/%s to cluster-admin: %w", namespace, name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("test: requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("test: the API server returned an empty token for ServiceAccount %s/%s", namespace, name)
	}
	return tr.Status.Token, nil
}

// DeleteServiceAccount deletes the ServiceAccount name in namespace and the
// ClusterRoleBinding ServiceAccountToken made for it. This revokes every
// token minted for it: the API server accepts a service account token only
// while the account it names exists. Whatever is already gone is no error.
// It leaves no connection open.
func DeleteServiceAccount(ctx context.Context, cfg *rest.Config, namespace, name string) error {
	cs, done, err := adminClientset(cfg)
	if err != nil {
		return fmt.Errorf("test: deleting ServiceAccount %s/%s: %w", namespace, name, err)
	}
	defer done()
	var errs []error
	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, AdminBindingName(namespace, name), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("test: deleting ClusterRoleBinding for %s/%s: %w", namespace, name, err))
	}
	if err := cs.CoreV1().ServiceAccounts(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("test: deleting ServiceAccount %s/%s: %w", namespace, name, err))
	}
	return errors.Join(errs...)
}

// AdminBindingName is the name of the ClusterRoleBinding that
// ServiceAccountToken creates for the ServiceAccount namespace/name.
func AdminBindingName(namespace, name string) string {
	return "mccr-test:" + namespace + ":" + name
}

// TokenConfig returns a config that reaches cfg's API server with nothing
// but its address, its CA and token: no client certificate, no other
// credential. It is what a KubeFedCluster and its Secret describe.
func TokenConfig(cfg *rest.Config, token string) *rest.Config {
	return &rest.Config{
		Host:            cfg.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData},
		BearerToken:     token,
	}
}
