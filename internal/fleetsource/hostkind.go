package fleetsource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	membermgr "github.com/mccr-dev/mccr/internal/member"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

// Host is the host Manager as the sources of member controllers see it.
type Host struct {
	// Cache is the host Manager's cache; nil makes the sources refuse to
	// start.
	Cache cache.Cache
	// Scheme names the kinds in reports (nil: by Go type).
	Scheme *runtime.Scheme
	// Forbidden are the kinds the host's identity may not list or watch
	// (nil: none known), as the host's watch error handler records them.
	Forbidden *syncinformer.Kinds
	// Mapper is the host's REST mapper, asked whether a kind the host did
	// not serve is served now before the host cache is (nil: the cache
	// is asked at once). Every member waiting for the kind asks it.
	Mapper meta.RESTMapper
	// Log is told of the kinds a source waits for.
	Log logr.Logger
}

// kindName is obj's kind as a member's WaitingFor and Unserved show a
// host kind: "example.com/v1, Kind=Policy (host)".
func (h Host) kindName(obj client.Object) string {
	if h.Scheme != nil {
		if gvk, err := apiutil.GVKForObject(obj, h.Scheme); err == nil {
			return gvk.String() + " (host)"
		}
	}
	return syncinformer.KindOf(obj) + " (host)"
}

// mapped tells whether the host's REST mapper knows obj's kind now
// (always, without a mapper or when the scheme cannot name the kind).
func (h Host) mapped(obj client.Object) bool {
	if h.Mapper == nil || h.Scheme == nil {
		return true
	}
	gvk, err := apiutil.GVKForObject(obj, h.Scheme)
	if err != nil {
		return true
	}
	_, err = h.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	return err == nil
}

// noMatchRetry is how often a source started without a waiter (its
// controller's warm-up turned off) asks again for a kind the host does
// not serve, as controller-runtime's Kind source does.
const noMatchRetry = 10 * time.Second

// HostKind returns a source for a member controller that delivers the
// events of obj's kind in the host cache to h, after the predicates (see
// server.HostKind). Its handler is removed from the host informer when the
// controller's ctx ends.
//
// Started by its controller's warm-up in a member, it waits for a kind the
// host does not serve yet (membermgr.AwaitServedElsewhere): the member
// lists it in WaitingKinds and syncs without it. A kind the host's
// identity may not list counts as synced, and the member lists it in
// UnservedKinds; the controller receives the host's objects once the rule
// is granted.
func HostKind(host Host, obj client.Object, h handler.EventHandler, preds ...predicate.Predicate) source.SyncingSource {
	return &hostKind{host: host, obj: obj, h: h, preds: preds, started: make(chan struct{})}
}

type hostKind struct {
	host  Host
	obj   client.Object
	h     handler.EventHandler
	preds []predicate.Predicate
	once  startOnce

	started chan struct{} // closed once the handler is registered (or that failed)
	synced  toolscache.DoneChecker
	err     error
}

func (k *hostKind) String() string { return fmt.Sprintf("host kind source: %T", k.obj) }

// Start adds the source's handler to the host informer of the kind, in the
// background, as controller-runtime's Kind source does; it is removed when
// ctx ends.
func (k *hostKind) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if k.host.Cache == nil || k.obj == nil || k.h == nil {
		return errors.New("server.HostKind: the Server, object and handler must not be nil")
	}
	if err := k.once.first(); err != nil {
		return err
	}
	go k.register(ctx, q)
	return nil
}

func (k *hostKind) register(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	defer close(k.started)
	kind := k.host.kindName(k.obj)
	get := func() (cache.Informer, error) {
		return k.host.Cache.GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
	}
	var inf cache.Informer
	for {
		var err error
		inf, err = membermgr.AwaitServedElsewhere(ctx, k.host.Log, kind, func() bool { return k.host.mapped(k.obj) }, get)
		if err == nil {
			break
		}
		if !meta.IsNoMatchError(err) || ctx.Err() != nil {
			k.err = fmt.Errorf("host kind %s: %w", kind, err)
			return
		}
		k.host.Log.Error(err, "kind not served by the host cluster; if it is a CRD, install it there", "kind", kind)
		t := time.NewTimer(noMatchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			k.err = fmt.Errorf("host kind %s: %w", kind, err)
			return
		case <-t.C:
		}
	}
	desc := syncinformer.KindOf(k.obj)
	membermgr.ReportForbiddenElsewhere(ctx, k.host.Forbidden, desc, kind, membermgr.ForbiddenElsewhereReason)
	reg, err := inf.AddEventHandler(informerHandler(ctx, q, k.h, k.preds))
	if err != nil {
		k.err = fmt.Errorf("host kind %s: %w", kind, err)
		return
	}
	context.AfterFunc(ctx, func() { _ = inf.RemoveEventHandler(reg) })
	// While the kind is in the host's forbidden set (the host's watch
	// error handler keeps it, until the host's reflector lists again), the
	// source counts as synced.
	k.synced = syncinformer.Follow(reg.HasSyncedChecker(), k.host.Forbidden, desc, ctx.Done(), false)
}

// WaitForSync returns once the host objects of the kind have been handed
// to the handler, or the host's identity turned out not to be allowed to
// list them.
func (k *hostKind) WaitForSync(ctx context.Context) error {
	select {
	case <-k.started:
	case <-ctx.Done():
		return fmt.Errorf("%s: not started: %w", k, ctx.Err())
	}
	if k.err != nil {
		return k.err
	}
	select {
	case <-k.synced.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for the host cache to sync: %w", k, ctx.Err())
	}
}

// HostObject returns an object standing for obj's kind in the host cache,
// for the builder's Watches in a member controller (see
// server.HostObject): a member's cache hands out the host's informer for
// it, so the builder's predicates reach host events. It is nil if the
// host's cache or obj is nil, which the controller refuses when it starts.
func HostObject(host Host, obj client.Object) client.Object {
	if host.Cache == nil || obj == nil {
		return nil
	}
	return &hostObject{Object: obj, host: host}
}

// hostObject is a host kind as a member's cache recognises it.
type hostObject struct {
	client.Object
	host Host
}

var _ membermgr.ServedElsewhere = &hostObject{}

// InformerElsewhere returns the host cache's informer of the kind.
func (o *hostObject) InformerElsewhere(ctx context.Context, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := o.host.Cache.GetInformer(ctx, o.Object, opts...)
	if err != nil {
		return nil, fmt.Errorf("host kind %T: %w", o.Object, err)
	}
	return inf, nil
}

// KindElsewhere names the kind as a member reports it.
func (o *hostObject) KindElsewhere() string { return o.host.kindName(o.Object) }

// MappedElsewhere tells whether the host's REST mapper knows the kind.
func (o *hostObject) MappedElsewhere() bool { return o.host.mapped(o.Object) }

// ForbiddenElsewhere returns the host's forbidden kinds and the kind's key.
func (o *hostObject) ForbiddenElsewhere() (*syncinformer.Kinds, string) {
	return o.host.Forbidden, syncinformer.KindOf(o.Object)
}
