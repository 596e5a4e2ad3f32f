package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/sample/syncer/api/v1alpha1"
	"github.com/mccr-dev/mccr/server"
)

// statusReconciler runs on the host: it keeps each FleetSetting's
// finalizer and works out its status from every member's copy.
type statusReconciler struct {
	srv *server.Server
	// host reads and writes FleetSettings on the host.
	host client.Client
	// members is the fan-out client: it reads each member's copy from that
	// member's cache.
	members client.Client
	patrol  time.Duration
}

// setupWithServer builds the host controller. A FleetSetting's status is
// worked out again when it changes; when a copy changes in any member
// (server.FleetKind: the members' own informers, no second watch); when a
// member becomes Ready, Unreachable or Failed, or leaves the fleet
// (server.ClusterEvents: every FleetSetting, since any may select it); and
// every patrol period, for what no event announces (a member's properties,
// a member that serves Setting only since a moment ago).
func (r *statusReconciler) setupWithServer() error {
	return ctrl.NewControllerManagedBy(r.srv.GetHostManager()).Named("fleetsetting-status").
		For(&v1alpha1.FleetSetting{}).
		WatchesRawSource(server.FleetKind(r.srv, &v1alpha1.Setting{}, &handler.EnqueueRequestForObject{}, ownCopies)).
		WatchesRawSource(server.ClusterEvents(r.srv, r.everyFleetSetting)).
		Complete(r)
}

// everyFleetSetting asks for the status of every FleetSetting.
func (r *statusReconciler) everyFleetSetting(ctx context.Context, ev server.ClusterEvent) []reconcile.Request {
	var list v1alpha1.FleetSettingList
	if err := r.host.List(ctx, &list); err != nil {
		r.srv.GetLogger().Error(err, "cannot list FleetSettings after a member changed", "cluster", ev.Cluster, "event", ev.Type)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Reconcile adds the finalizer to a new FleetSetting, writes its status,
// and lets a deleted one go once no Ready member holds its copy. Members
// that are not Ready are not waited for: their copies are removed when
// they are Ready again (their controller finds them without a
// FleetSetting), and a member that left the fleet is no longer ours to
// clean.
func (r *statusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fs v1alpha1.FleetSetting
	if err := r.host.Get(ctx, req.NamespacedName, &fs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !fs.DeletionTimestamp.IsZero()
	switch {
	case deleting && !controllerutil.ContainsFinalizer(&fs, finalizer):
		return ctrl.Result{}, nil
	case !deleting && controllerutil.AddFinalizer(&fs, finalizer):
		// The update brings the FleetSetting back here.
		return ctrl.Result{}, r.host.Update(ctx, &fs)
	}
	status, holding := r.observe(ctx, &fs)
	if !equality.Semantic.DeepEqual(status, fs.Status) {
		base := fs.DeepCopy()
		fs.Status = status
		if err := r.host.Status().Patch(ctx, &fs, client.MergeFrom(base)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	if deleting && holding == 0 {
		controllerutil.RemoveFinalizer(&fs, finalizer)
		if err := r.host.Update(ctx, &fs); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		ctrl.LoggerFrom(ctx).Info("every copy removed; FleetSetting released")
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: r.patrol}, nil
}

// observe works out fs's status from the fleet as the Server sees it, and
// counts the Ready members that still hold a copy.
func (r *statusReconciler) observe(ctx context.Context, fs *v1alpha1.FleetSetting) (v1alpha1.FleetSettingStatus, int) {
	deleting := !fs.DeletionTimestamp.IsZero()
	selects, err := selection(&fs.Spec)
	if err != nil && !deleting {
		// The members change nothing until the spec is fixed (see plan),
		// and neither does the status but for saying why.
		var st v1alpha1.FleetSettingStatus
		fs.Status.DeepCopyInto(&st)
		st.ObservedGeneration, st.Message = fs.Generation, err.Error()
		return st, 0
	}
	st := v1alpha1.FleetSettingStatus{ObservedGeneration: fs.Generation}
	holding := 0
	for _, m := range r.srv.Statuses() {
		selected := err == nil && selects(m.Name, m.Properties)
		if selected {
			st.Selected++
		}
		e, holds := r.entry(ctx, fs, m, selected && !deleting)
		if holds {
			holding++
		}
		if e == nil {
			continue
		}
		if e.State == v1alpha1.SyncStateSynced {
			st.Synced++
		}
		st.Clusters = append(st.Clusters, *e)
	}
	return st, holding
}

// entry is member m's line in fs's status, nil when m neither should nor
// does hold a copy; holds reports whether m is Ready and holds one.
func (r *statusReconciler) entry(ctx context.Context, fs *v1alpha1.FleetSetting, m server.ClusterStatus, want bool) (e *v1alpha1.ClusterSync, holds bool) {
	e = &v1alpha1.ClusterSync{Name: m.Name}
	if m.Phase != server.PhaseReady {
		e.State, e.Message = v1alpha1.SyncStateClusterNotReady, string(m.Phase)
		if m.LastError != nil {
			e.Message += ": " + m.LastError.Error()
		}
		return keepIf(want, e), false
	}
	// A member's controller that waits for its kind says so in WaitingFor;
	// a read of a kind the member does not serve says so itself.
	waiting := slices.Contains(m.WaitingFor, settingKind)
	var cp v1alpha1.Setting
	var err error
	if !waiting {
		err = r.members.Get(known.WithCluster(ctx, m.Name), client.ObjectKeyFromObject(fs), &cp)
	}
	switch {
	case waiting || meta.IsNoMatchError(err):
		e.State, e.Message = v1alpha1.SyncStateWaitingForCRD, "the cluster does not serve "+settingKind
		return keepIf(want, e), false
	case apierrors.IsNotFound(err):
		e.State, e.Message = v1alpha1.SyncStatePending, "no copy yet"
		return keepIf(want, e), false
	case err != nil:
		e.State, e.Message = v1alpha1.SyncStateClusterNotReady, err.Error()
		return keepIf(want, e), false
	case !managed(&cp):
		e.State, e.Message = v1alpha1.SyncStateConflict, "a Setting of this name that the syncer did not make is in the way"
		return keepIf(want, e), false
	}
	e.ObservedGeneration = sourceGeneration(&cp)
	switch why := copyDrift(&cp, fs); {
	case !want:
		e.State = v1alpha1.SyncStateDeleting
	case e.ObservedGeneration != fs.Generation:
		e.State, e.Message = v1alpha1.SyncStatePending, fmt.Sprintf("copy of generation %d", e.ObservedGeneration)
	case why != "":
		e.State, e.Message = v1alpha1.SyncStateOutOfSync, why
	default:
		e.State = v1alpha1.SyncStateSynced
	}
	return e, true
}

// keepIf is e when the member should hold a copy, else nil: a member that
// should not and does not needs no line.
func keepIf(want bool, e *v1alpha1.ClusterSync) *v1alpha1.ClusterSync {
	if want {
		return e
	}
	return nil
}
