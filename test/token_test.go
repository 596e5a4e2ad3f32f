package test_test

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/test"
)

// whoAmI asks the API server who cfg authenticates as.
func whoAmI(ctx context.Context, cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}

func TestTokenAuthenticatesAndIsRevoked(t *testing.T) {
	ctx := t.Context()
	c := fleet.Clusters[0]
	const ns, sa = "token-test", "fed-admin"

	tok, err := test.ServiceAccountToken(ctx, c.Config, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	cfg := test.TokenConfig(c.Config, tok)
	if len(cfg.CertData) != 0 || len(cfg.KeyData) != 0 || cfg.Host != c.Config.Host || len(cfg.CAData) == 0 {
		t.Fatalf("TokenConfig must hold only host, CA and token: %+v", cfg)
	}
	user, err := whoAmI(ctx, cfg)
	if err != nil {
		t.Fatalf("token does not authenticate: %v", err)
	}
	if want := "system:serviceaccount:" + ns + ":" + sa; user != want {
		t.Fatalf("token authenticates as %q, want %q", user, want)
	}
	// cluster-admin: it may read anything.
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("token is not cluster-admin: %v", err)
	}

	// A second call mints a different token for the same account.
	tok2, err := test.ServiceAccountToken(ctx, c.Config, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	if tok2 == tok {
		t.Fatal("a second call returned the same token")
	}
	if _, err := whoAmI(ctx, test.TokenConfig(c.Config, tok2)); err != nil {
		t.Fatalf("rotated token does not authenticate: %v", err)
	}

	if err := test.DeleteServiceAccount(ctx, c.Config, ns, sa); err != nil {
		t.Fatal(err)
	}
	if err := test.DeleteServiceAccount(ctx, c.Config, ns, sa); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	// The API server checks the account through its own cache: give the
	// deletion a moment to reach it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := whoAmI(ctx, cfg)
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token still accepted after its ServiceAccount was deleted (last error: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
