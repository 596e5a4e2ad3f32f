package server

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// recordHostForbidden returns the host Manager's options with a watch
// error handler that adds to forbidden each kind the host's identity may
// not list or watch (a 403), logging it the first time, before calling
// the user's handler (or client-go's default). Host kinds of member
// controllers (HostKind, HostObject) read the set: such a kind does not
// hold up the member's sync, and the member's Status.Unserved names it.
// The host's own controllers wait for the kind as controller-runtime's do.
func recordHostForbidden(opts ctrl.Options, forbidden *syncinformer.Kinds) ctrl.Options {
	next := opts.Cache.DefaultWatchErrorHandler
	if next == nil {
		next = toolscache.DefaultWatchErrorHandler
	}
	log := opts.Logger.WithName("mccr")
	opts.Cache.DefaultWatchErrorHandler = func(ctx context.Context, r *toolscache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			kind := r.TypeDescription()
			if !forbidden.Has(kind) {
				log.Info("the host cluster's identity may not list or watch a kind: member controllers watching it run without it until the RBAC rule is granted", "kind", kind, "error", err.Error())
			}
			forbidden.Forbid(kind)
		}
		next(ctx, r, err)
	}
	return opts
}
