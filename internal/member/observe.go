package member

import (
	"context"
	"reflect"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Results of a Reconcile as Options.Reconciled gets them: the values of
// the "result" label of controller-runtime's
// controller_runtime_reconcile_total.
const (
	ResultSuccess      = "success"
	ResultError        = "error"
	ResultRequeue      = "requeue"
	ResultRequeueAfter = "requeue_after"
)

// Per-cluster reconcile observation.
//
// controller-runtime's reconcile metrics are labelled by controller only:
// the same controller in a hundred members is one series. To observe each
// member's reconciles, Add wraps the reconciler of the controllers built
// by controller-runtime, before they start, with one that times each call
// and reports it to Options.Reconciled. controller-runtime's own metrics
// stay as they are.
//
// Those controllers are *controller.Controller[request] of the internal
// package sigs.k8s.io/controller-runtime/pkg/internal/controller: nothing
// but reflection reaches them. What this relies on, checked by
// TestObserveReconcilesFindsTheReconciler against the controller-runtime
// in go.mod: exported fields Name (a string) and Do (the reconciler,
// called by the controller's Reconcile, inside its panic recovery and its
// ReconciliationTimeout). Only controllers for reconcile.Request are
// wrapped; any other runnable, and a controller whose shape differs, is
// left as it is.

// crControllerPkg is the package of controller-runtime's controllers.
const crControllerPkg = "sigs.k8s.io/controller-runtime/pkg/internal/controller"

var reconcilerType = reflect.TypeFor[reconcile.Reconciler]()

// observeReconciles makes r report its reconciles to report, if r is a
// controller-runtime controller for reconcile.Request that does not
// already. It reports whether r does now. Call it before r starts.
func observeReconciles(r any, report func(controller, result string, took time.Duration)) bool {
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct || v.Elem().Type().PkgPath() != crControllerPkg {
		return false
	}
	s := v.Elem()
	name, do := s.FieldByName("Name"), s.FieldByName("Do")
	if !name.IsValid() || name.Kind() != reflect.String ||
		!do.IsValid() || !do.CanSet() || do.Type() != reconcilerType || do.IsNil() {
		return false
	}
	next := do.Interface().(reconcile.Reconciler)
	if _, ok := next.(*observedReconciler); ok {
		return true
	}
	do.Set(reflect.ValueOf(reconcile.Reconciler(&observedReconciler{next: next, name: name.String(), report: report})))
	return true
}

type observedReconciler struct {
	next   reconcile.Reconciler
	name   string
	report func(controller, result string, took time.Duration)
}

func (o *observedReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	begin := time.Now()
	returned := false
	defer func() {
		// A panic goes on up, untouched, to the controller's recovery,
		// which counts it as an error when it recovers it.
		if !returned {
			o.report(o.name, ResultError, time.Since(begin))
		}
	}()
	res, err := o.next.Reconcile(ctx, req)
	returned = true
	o.report(o.name, resultOf(res, err), time.Since(begin))
	return res, err
}

// resultOf classifies a Reconcile's outcome as controller-runtime's
// reconcileHandler does.
func resultOf(res reconcile.Result, err error) string {
	switch {
	case err != nil:
		return ResultError
	case res.RequeueAfter > 0:
		return ResultRequeueAfter
	case res.Requeue: //nolint:staticcheck // deprecated, still honoured by controller-runtime
		return ResultRequeue
	}
	return ResultSuccess
}
