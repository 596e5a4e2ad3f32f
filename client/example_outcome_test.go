package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
)

// ReportReconciler writes one report per Pod, named by the API server
// (generateName). A Create whose outcome is unknown may have made the
// report, so the reconciler finds reports by a label of its own before it
// creates one.
type ReportReconciler struct {
	Client crclient.Client // the Server's fan-out client
	Server *server.Server
}

func (r *ReportReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.Client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, crclient.IgnoreNotFound(err)
	}
	// The cache may not show a report made a moment ago: read the
	// cluster's API server.
	cluster, _ := known.ClusterFrom(ctx)
	mgr, err := r.Server.GetManager(cluster)
	if err != nil {
		return ctrl.Result{}, err // not Ready: retried later, nothing was sent
	}
	mine := crclient.MatchingLabels{"example.com/report-of": string(pod.UID)}
	var reports corev1.ConfigMapList
	if err := mgr.GetAPIReader().List(ctx, &reports, crclient.InNamespace(pod.Namespace), mine); err != nil {
		return ctrl.Result{}, err
	}
	if len(reports.Items) > 0 {
		return ctrl.Result{}, nil // made already, perhaps by an attempt whose answer was lost
	}
	report := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: pod.Namespace, GenerateName: pod.Name + "-report-", Labels: mine,
	}}
	err = r.Client.Create(ctx, report)
	if errors.Is(err, mcclient.ErrOutcomeUnknown) {
		// The report may exist. Come back: the List above tells.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, err
}

// A write whose cluster leaves or restarts while it waits for its answer
// returns that answer if it comes within the write's grace, and
// ErrOutcomeUnknown if it does not: the API server may have applied it.
// ErrClusterNotFound and ErrClusterNotReady mean that nothing was sent.
func ExampleErrOutcomeUnknown() {
	srv, err := server.NewServer(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	r := &ReportReconciler{Client: srv.GetClient(), Server: srv}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).Complete(r)
	})

	// With a name of your own, a Create made again after ErrOutcomeUnknown
	// cannot make a second object: it fails with AlreadyExists.
	ctx := known.WithCluster(context.Background(), "east")
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	for range 3 {
		err = srv.GetClient().Create(ctx, settings.DeepCopy())
		if !errors.Is(err, mcclient.ErrOutcomeUnknown) {
			break
		}
		// It may have been applied: the next Create tells.
	}
	if crclient.IgnoreAlreadyExists(err) == nil {
		fmt.Println("settings exist in east, once")
	}
}
