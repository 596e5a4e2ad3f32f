package member

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"

	mccrconfig "github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/test"
)

// kindsSeen is what an owner following OnKindsChanged knows of a member's
// reports: it reads them when told, and only then, as the Server's cluster
// record does.
type kindsSeen struct {
	m *Manager

	mu       sync.Mutex
	calls    int
	waiting  []string
	unserved []UnservedKind
}

func followKinds(m *Manager) *kindsSeen {
	k := &kindsSeen{m: m}
	m.OnKindsChanged(k.changed)
	return k
}

func (k *kindsSeen) changed() {
	// Read with no lock of ours held, as the record reads them under its
	// own: the reports must not call back.
	waiting, unserved := k.m.WaitingKinds(), k.m.UnservedKinds()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	k.waiting, k.unserved = waiting, unserved
}

func (k *kindsSeen) last() (waiting []string, unserved []UnservedKind, calls int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.waiting, k.unserved, k.calls
}

// TestOnKindsChangedLateKind: the owner is told when a controller starts
// waiting for a kind the cluster does not serve, and again once the kind
// is served and it stops waiting; what it reads then is the report's new
// state.
func TestOnKindsChangedLateKind(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	cfg, admin := onAPIServer(t, cl)
	ns := createNamespace(t, admin)
	crd, gvk := widgetCRD()
	m, _, _ := lateKindMember(t, cfg, ns, gvk)
	seen := followKinds(m)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	test.Eventually(t, 10*time.Second, "told the kind waits", func() bool {
		waiting, _, _ := seen.last()
		return slices.Equal(waiting, []string{gvk.String()})
	})
	if err := test.InstallCRDObjects(cfg, crd); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, kindPollCap+10*time.Second, "told the kind no longer waits", func() bool {
		waiting, _, _ := seen.last()
		return len(waiting) == 0
	})
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestOnKindsChangedForbiddenKind: the owner is told when the member's
// identity may not list a kind (its report names the kind by group,
// version and kind), and when the rule is granted and the kind syncs.
// The function given last is the one called, and nil stops the calls.
func TestOnKindsChangedForbiddenKind(t *testing.T) {
	leakcheck.Cleanup(t)
	s := newFake(t, configMap("a", "x"), secret("a", "s"))
	s.Forbid("secrets")
	m := build(t, s, BuildOptions{Options: Options{Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)}}})
	if err := ctrl.NewControllerManagedBy(m).Named("configmaps").For(&corev1.ConfigMap{}).Complete(names(make(chan string, 10))); err != nil {
		t.Fatal(err)
	}
	secrets := make(chan string, 10)
	if err := ctrl.NewControllerManagedBy(m).Named("secrets").For(&corev1.Secret{}).Complete(names(secrets)); err != nil {
		t.Fatal(err)
	}
	m.OnKindsChanged(func() { t.Error("a replaced function was called") })
	seen := followKinds(m)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	test.Eventually(t, 10*time.Second, "told Secrets are forbidden", func() bool {
		_, unserved, _ := seen.last()
		return len(unserved) == 1 && unserved[0].Kind == "/v1, Kind=Secret" && strings.Contains(unserved[0].Reason, "may not list or watch")
	})
	s.Permit("secrets")
	awaitName(t, secrets, "s", 60*time.Second, "the Secret controller reconciles once Secrets are permitted")
	test.Eventually(t, 10*time.Second, "told Secrets are served", func() bool {
		_, unserved, _ := seen.last()
		return len(unserved) == 0
	})
	// Stopping changes nothing the owner must hear of once it said nil.
	m.OnKindsChanged(nil)
	_, _, calls := seen.last()
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
	if _, _, after := seen.last(); after != calls {
		t.Errorf("%d calls after OnKindsChanged(nil)", after-calls)
	}
}

// TestOnKindsChangedScope: the owner is told when a kind is refused for the
// member's scope.
func TestOnKindsChangedScope(t *testing.T) {
	cl := apiServer(t)
	leakcheck.Cleanup(t)
	_, admin := onAPIServer(t, cl)
	ns := createNamespace(t, admin)
	scope, err := mccrconfig.NewScope([]string{ns}, false)
	if err != nil {
		t.Fatal(err)
	}
	m, _, roles, _ := scopedMember(t, scope)
	seen := followKinds(m)
	r := run(t, m)
	if !m.WaitForSync(syncCtx(t)) {
		t.Fatal("WaitForSync = false")
	}
	test.Eventually(t, 10*time.Second, "told ClusterRoles are outside the scope", func() bool {
		_, unserved, _ := seen.last()
		return len(unserved) == 1 && unserved[0].Kind == "rbac.authorization.k8s.io/v1, Kind=ClusterRole"
	})
	select {
	case name := <-roles:
		t.Errorf("the ClusterRole controller reconciled %s outside the scope", name)
	default:
	}
	if err := r.stop(t); err != nil {
		t.Errorf("Start = %v", err)
	}
}

// TestOnKindsChangedWithoutBuild: a Manager made by New reports no kinds,
// and takes a function without calling it.
func TestOnKindsChangedWithoutBuild(t *testing.T) {
	m := New(nil, Options{})
	m.OnKindsChanged(func() { t.Error("called") })
	m.OnKindsChanged(nil)
	if m.WaitingKinds() != nil || m.UnservedKinds() != nil {
		t.Error("a Manager made by New reports kinds")
	}
}
