package configwatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/safe"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

const (
	// hostRetryFirst and hostRetryLimit bound the backoff between attempts
	// to start watching a kind on the host (while its CRD is missing, say).
	// The limit is low so that a CRD installed after the watcher started
	// (an operator deployed before the inventory, Cluster API or KubeFed
	// it reads) is served within seconds: hostRetryLimit, plus the time the
	// host takes to serve it, plus a list. Each attempt while the kind is
	// missing costs one discovery request (the API groups, and with
	// aggregated discovery their resources); the alternative, a watch on
	// CustomResourceDefinitions, would be quicker but needs list and watch
	// on them cluster-wide, which an operator is seldom granted, and so a
	// polling fallback all the same.
	hostRetryFirst = 500 * time.Millisecond
	hostRetryLimit = 2 * time.Second

	// hostErrorInterval is how often the same error from the host cluster
	// (a watch that keeps failing) is reported again while it lasts.
	hostErrorInterval = time.Minute

	// hostLiveTimeout bounds a read of the host past the cache (leaving).
	hostLiveTimeout = 10 * time.Second
)

// hostWatched is a kind of object a hostCache watches.
type hostWatched struct {
	kind string // for messages: "Secrets"
	obj  client.Object
	// resolve, if set, works out obj when watching starts, from what the
	// host serves (which version of a CRD, say). Its failures are retried
	// like a failure to watch; a NoMatch error counts as the kind missing.
	resolve func(meta.RESTMapper) (client.Object, error)
	// selector, if set, restricts the cache to the objects of this kind it
	// matches (on top of hostCacheSpec.selector). Only for namespaced
	// built-in kinds (Secrets): their scope is known without asking the
	// host, which New must not wait for.
	selector labels.Selector
}

// hostCacheSpec is what a watcher tells hostCache.init: what to watch and
// how, and what to do on each change.
type hostCacheSpec struct {
	// what names the watcher in messages ("configwatcher: <what> host …")
	// and its constructor (New<what>Watcher).
	what string
	// quoteHost, if set, turns the host's address into what messages
	// quote (by default, the address as it is).
	quoteHost func(string) string
	log       logr.Logger
	// schemes register the watched types.
	schemes []func(*runtime.Scheme) error
	// namespaces restricts the cache (nil: all namespaces); selector, if
	// set, restricts it to the objects it matches.
	namespaces map[string]cache.Config
	selector   labels.Selector
	transform  toolscache.TransformFunc
	watched    []hostWatched
	// noMatch, if set, is wrapped around a failure to watch a kind the
	// host does not serve.
	noMatch error
	// describe words a failure to watch kind (a type description, in the
	// cache's own failures) as reported. By default: "configwatcher:
	// <what> host <host>: watching <kind>: <err>", redacted.
	describe func(kind string, err error) error
	// watching is logged once the cache has synced.
	watching string
	// sync works out and publishes the fleet from the cache. It returns
	// when it wants to be called again without a change (zero: only on a
	// change), and false once the watcher is stopped.
	sync func() (next time.Time, ok bool)
}

// hostCache is the bookkeeping the watchers of a host cluster share: a
// controller-runtime cache of the watched objects and its lifecycle, the
// publisher, the signal that something changed, the run loop calling the
// watcher's sync, and the reporting of the host's failures.
type hostCache struct {
	spec  hostCacheSpec
	log   logr.Logger
	host  string
	pub   *publisher
	cache cache.Cache
	// live reads the host itself, past the cache (see leaving).
	live client.Reader
	http *http.Client
	// mapper is the cache's: it resolves kinds through the host's
	// discovery, once it is asked to.
	mapper meta.RESTMapper

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once

	// changed is poked (never blocking) by the informers' handlers.
	changed chan struct{}

	// settled is closed once the informers have synced or the watcher
	// stops; see syncinformer.Wrap.
	settled     chan struct{}
	markSettled func()

	hostErrs hostErrorFilter
	// getRefused: leaving has logged that reading past the cache is
	// refused (once; later refusals at V(1)).
	getRefused atomic.Bool
}

// init builds the cache without starting it; start does. h is the
// zero value, in its place in the watcher.
func (h *hostCache) init(hostCfg *rest.Config, spec hostCacheSpec) error {
	if hostCfg == nil {
		return fmt.Errorf("configwatcher: New%sWatcher: host config is nil", spec.what)
	}
	scheme := runtime.NewScheme()
	for _, add := range spec.schemes {
		if err := add(scheme); err != nil {
			return fmt.Errorf("configwatcher: %s scheme: %w", spec.what, err)
		}
	}
	h.host = hostCfg.Host
	if spec.quoteHost != nil {
		h.host = spec.quoteHost(h.host)
	}
	hostCfg = rest.CopyConfig(hostCfg)
	hc, err := rest.HTTPClientFor(hostCfg)
	if err != nil {
		return fmt.Errorf("configwatcher: %s host %s: %w", spec.what, h.host, err)
	}
	if spec.describe == nil {
		spec.describe = func(kind string, err error) error {
			return fmt.Errorf("configwatcher: %s host %s: watching %s: %w", spec.what, h.host, kind, config.RedactError(err))
		}
	}
	h.spec, h.log, h.http = spec, spec.log, hc
	h.changed = make(chan struct{}, 1)
	h.settled = make(chan struct{})
	h.hostErrs.seen = map[string]time.Time{}
	h.pub = newPublisher(h.log)
	h.markSettled = sync.OnceFunc(func() { close(h.settled) })
	byObject, err := h.initMapper(hostCfg, scheme, spec.watched)
	if err != nil {
		return fmt.Errorf("configwatcher: %s host %s: %w", spec.what, h.host, err)
	}
	// The cache makes no request before it is started, so a host that is
	// down or lacks a CRD is found out (and reported) by run.
	h.cache, err = cache.New(hostCfg, cache.Options{
		HTTPClient:               hc,
		Scheme:                   scheme,
		Mapper:                   h.mapper,
		DefaultNamespaces:        spec.namespaces,
		DefaultLabelSelector:     spec.selector,
		DefaultTransform:         spec.transform,
		DefaultWatchErrorHandler: h.watchError,
		ByObject:                 byObject,
		// Restricted to a namespace, the cache starts a goroutine per
		// informer and per handler registration that waits for its sync
		// checker; an informer stopped before its first list (the host
		// is unreachable, or forbids the list, when the watcher stops)
		// never syncs, and those goroutines would outlive the watcher.
		// The checkers complete once run has seen the cache sync, or the
		// watcher stops.
		NewInformer: syncinformer.Wrap(h.settled, nil, nil),
	})
	if err != nil {
		return fmt.Errorf("configwatcher: %s host %s: %w", spec.what, h.host, err)
	}
	// Like the cache, the client makes no request before it is used.
	h.live, err = client.New(hostCfg, client.Options{HTTPClient: hc, Scheme: scheme, Mapper: h.mapper})
	if err != nil {
		return fmt.Errorf("configwatcher: %s host %s: %w", spec.what, h.host, err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return nil
}

// initMapper sets up the cache's REST mapper and the ByObject settings of
// the kinds watched with their own selector. cache.New asks the mapper
// whether each ByObject kind is namespaced; those kinds are answered from
// a static table, so that New makes no request to the host. Every other
// kind is looked up through the host's discovery, lazily.
func (h *hostCache) initMapper(hostCfg *rest.Config, scheme *runtime.Scheme, watched []hostWatched) (map[client.Object]cache.ByObject, error) {
	dynamic, err := apiutil.NewDynamicRESTMapper(hostCfg, h.http)
	if err != nil {
		return nil, err
	}
	static := meta.NewDefaultRESTMapper(nil)
	var byObject map[client.Object]cache.ByObject
	for _, wd := range watched {
		if wd.selector == nil {
			continue
		}
		gvk, err := apiutil.GVKForObject(wd.obj, scheme)
		if err != nil {
			return nil, err
		}
		static.Add(gvk, meta.RESTScopeNamespace)
		if byObject == nil {
			byObject = map[client.Object]cache.ByObject{}
		}
		byObject[wd.obj] = cache.ByObject{Label: wd.selector}
	}
	h.mapper = staticFirstMapper{RESTMapper: dynamic, static: static}
	return byObject, nil
}

// staticFirstMapper answers RESTMapping from static when it knows the
// kind, and from the embedded (dynamic) mapper otherwise. Unlike
// meta.FirstHitRESTMapper it never merges the two mappers' errors, so a
// failure of the host's discovery is not mistaken for a kind it lacks.
type staticFirstMapper struct {
	meta.RESTMapper
	static meta.RESTMapper
}

func (m staticFirstMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if mapping, err := m.static.RESTMapping(gk, versions...); err == nil {
		return mapping, nil
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// start starts the cache and the run loop.
func (h *hostCache) start() {
	h.wg.Go(func() {
		if err := h.cache.Start(h.ctx); err != nil {
			h.pub.report(fmt.Errorf("configwatcher: %s host %s: cache: %w", h.spec.what, h.host, err))
		}
	})
	h.wg.Go(h.run)
}

// Events delivers cluster changes. Read it: events are never dropped, so an
// unread Events channel stalls the watcher once its buffer is full. It is
// closed after Stop.
func (h *hostCache) Events() <-chan Event { return h.pub.events }

// Errors delivers problems with the watched objects and the host, each
// naming what it is about. Reading it is optional: the latest errors are
// buffered and older ones dropped. It is closed after Stop.
func (h *hostCache) Errors() <-chan error { return h.pub.errors }

// Stop ends the watcher: it stops the cache and its watches, waits for the
// watcher's goroutines, and closes both channels. Calling it again (or
// concurrently) returns once that is done. It is prompt, except that a
// discovery request already on its way to a host that does not answer is
// waited for, up to client-go's dial and TLS handshake timeouts.
func (h *hostCache) Stop() {
	h.stopOnce.Do(func() {
		h.cancel()
		h.markSettled()
		h.wg.Wait()
		utilnet.CloseIdleConnectionsFor(h.http.Transport)
		h.pub.close()
	})
}

// list lists kind (for messages: "Secrets") from the cache. A failure is
// reported, and then listed is false; running is false once the watcher
// is stopped.
func (h *hostCache) list(kind string, list client.ObjectList, opts ...client.ListOption) (listed, running bool) {
	if err := h.cache.List(h.ctx, list, opts...); err != nil {
		if h.ctx.Err() != nil {
			return false, false
		}
		h.pub.report(fmt.Errorf("configwatcher: %s host %s: listing %s: %w", h.spec.what, h.host, kind, err))
		return false, true
	}
	return true, true
}

// leaving reports whether obj, as the cache holds it, is gone from the
// host, replaced by another object of its name, or being deleted there. An
// owner (a Cluster API Cluster) and the Secret it names reach the cache
// through watches of their own, and their deletions in either order: a
// Secret missing while its owner is still cached is no problem when the
// owner is leaving too. It asks the host (one GET, bounded by
// hostLiveTimeout); when the host does not say (unreachable, get
// forbidden), obj counts as staying, and a refusal is logged: the right
// to get is missing.
func (h *hostCache) leaving(obj client.Object) bool {
	ctx, cancel := context.WithTimeout(h.ctx, hostLiveTimeout)
	defer cancel()
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false
	}
	err := h.live.Get(ctx, client.ObjectKeyFromObject(obj), live)
	switch {
	case apierrors.IsNotFound(err):
		return true
	case (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && !h.getRefused.Swap(true):
		h.log.Info("could not tell whether an object is leaving: reading it is refused; grant get on it so that one deleted with what it names leaves without an error",
			"object", obj.GetNamespace()+"/"+obj.GetName(), "error", config.RedactError(err))
		return false
	case err != nil:
		h.log.V(1).Info("could not tell whether an object is leaving", "object", obj.GetNamespace()+"/"+obj.GetName(), "error", config.RedactError(err))
		return false
	}
	return live.GetUID() != obj.GetUID() || live.GetDeletionTimestamp() != nil
}

func (h *hostCache) poke() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *hostCache) run() {
	if !h.startWatching() {
		return
	}
	if !h.cache.WaitForCacheSync(h.ctx) {
		return
	}
	h.markSettled()
	h.log.V(1).Info(h.spec.watching)
	// Since Go 1.23 a stopped or reset timer delivers no stale tick, so the
	// timer needs no draining.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next, ok := h.sync()
		if !ok {
			return
		}
		var wake <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case <-h.ctx.Done():
			return
		case <-h.changed:
		case <-wake:
		}
		timer.Stop()
	}
}

// hostSyncRetry is when a sync that panicked is tried again, if no change
// comes first.
const hostSyncRetry = 5 * time.Second

// sync runs the watcher's sync. Each watcher already keeps a panic on one
// object to that object (claimSafely); this is the net under the rest of
// its work: a panic is reported, the fleet stays as last published, and the
// sync is tried again on the next change or after hostSyncRetry.
func (h *hostCache) sync() (next time.Time, ok bool) {
	err := safe.Call(h.log, "configwatcher: "+h.spec.what+" host "+h.host, func() error {
		next, ok = h.spec.sync()
		return nil
	})
	if err != nil {
		h.pub.report(err)
		return time.Now().Add(hostSyncRetry), h.ctx.Err() == nil
	}
	return next, ok
}

// startWatching sets up the informers of the watched kinds, retrying with
// a backoff while that fails (typically: a CRD is not installed). It
// returns false when the watcher is stopped meanwhile.
func (h *hostCache) startWatching() bool {
	objs := h.spec.watched
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { h.poke() },
		UpdateFunc: func(any, any) { h.poke() },
		DeleteFunc: func(any) { h.poke() },
	}
	delay := hostRetryFirst
	for len(objs) > 0 {
		obj, err := objs[0].obj, error(nil)
		if objs[0].resolve != nil {
			obj, err = objs[0].resolve(h.mapper)
		}
		var inf cache.Informer
		if err == nil {
			inf, err = h.cache.GetInformer(h.ctx, obj, cache.BlockUntilSynced(false))
		}
		if err == nil {
			_, err = inf.AddEventHandler(handler)
		}
		if err == nil {
			objs = objs[1:]
			continue
		}
		if h.ctx.Err() != nil {
			return false
		}
		if h.spec.noMatch != nil && meta.IsNoMatchError(err) && !errors.Is(err, h.spec.noMatch) {
			err = fmt.Errorf("%w (%w)", h.spec.noMatch, err)
		}
		// Attempts come every few seconds: the same failure is reported
		// again at most once per hostErrorInterval.
		err = h.spec.describe(objs[0].kind, err)
		if h.hostErrs.fresh(err.Error(), time.Now()) {
			h.pub.report(fmt.Errorf("%w; retrying every %s", err, hostRetryLimit))
		}
		select {
		case <-h.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, hostRetryLimit)
	}
	return true
}

// watchError receives the failures of the cache's list and watch calls.
// Those that are part of normal operation are ignored; the others are
// reported, the same message at most once per hostErrorInterval, since
// the cache retries on its own.
func (h *hostCache) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	switch {
	case ctx.Err() != nil, h.ctx.Err() != nil,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.Canceled),
		apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return
	}
	err = h.spec.describe(r.TypeDescription(), err)
	if h.hostErrs.fresh(err.Error(), time.Now()) {
		h.pub.report(err)
	}
}

// hostErrorFilter lets the same message through at most once per
// hostErrorInterval.
type hostErrorFilter struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (f *hostErrorFilter) fresh(msg string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for m, at := range f.seen {
		if now.Sub(at) >= hostErrorInterval {
			delete(f.seen, m) // also keeps the map small
		}
	}
	if _, ok := f.seen[msg]; ok {
		return false
	}
	f.seen[msg] = now
	return true
}
