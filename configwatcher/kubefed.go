package configwatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/internal/syncinformer"
)

const (
	// kubeFedRetryFirst and kubeFedRetryLimit bound the backoff between attempts
	// to start watching KubeFedClusters (while the CRD is missing, say).
	kubeFedRetryFirst = time.Second
	kubeFedRetryLimit = 30 * time.Second

	// kubeFedHostErrorInterval is how often the same error from the host
	// cluster (a watch that keeps failing) is reported again while it lasts.
	kubeFedHostErrorInterval = time.Minute

	// Keys read from a KubeFedCluster's Secret.
	kubeFedTokenKey = "token"
	kubeFedCAKey    = "ca.crt"
)

var (
	// ErrKubeFedNotInstalled means the host cluster does not serve the
	// KubeFedCluster CRD (kubefedclusters.core.kubefed.io).
	ErrKubeFedNotInstalled = errors.New("the KubeFedCluster CRD (kubefedclusters.core.kubefed.io) is not installed")
	// ErrKubeFedSecretNotFound means the Secret a KubeFedCluster names does not
	// exist (yet, or any more).
	ErrKubeFedSecretNotFound = errors.New("referenced Secret not found")
	// ErrKubeFedSecretNoToken means the Secret a KubeFedCluster names has no
	// "token" key, or an empty one.
	ErrKubeFedSecretNoToken = errors.New(`referenced Secret has no "token"`)
	// ErrKubeFedClusterInvalid means a KubeFedCluster's spec cannot be turned
	// into a config (no endpoint, a bad proxy URL, a CA bundle without a
	// certificate, an unknown TLS validation).
	ErrKubeFedClusterInvalid = errors.New("invalid KubeFedCluster")
)

// KubeFedWatcher is a ConfigWatcher over the clusters joined to a KubeFed
// control plane: every KubeFedCluster in the KubeFed namespace of the host
// cluster is a cluster of the fleet, named after the object, reached at its
// spec.apiEndpoint with the bearer token in the "token" key of the Secret
// named by spec.secretRef. Its config's Source.Object is
// "KubeFedCluster <namespace>/<name>".
//
// It watches KubeFedClusters and Secrets of that namespace through a
// controller-runtime cache (no polling) and, on every change, works out the
// whole fleet again and publishes only the difference: a rotated token or a
// new endpoint is one Updated event, a change that does not alter the config
// is none.
//
// How a KubeFedCluster becomes a rest.Config:
//
//   - spec.apiEndpoint is the host; "host", "host:port" and "IP:port"
//     forms get https://.
//   - spec.caBundle is the CA; when empty, the Secret's "ca.crt" is used if
//     present, and the system roots otherwise.
//   - spec.proxyURL is the proxy for every request.
//   - spec.disabledTLSValidations relaxes TLS only as far as it asks. "*"
//     turns verification off (rest.Config Insecure; the CA is dropped, as
//     client-go refuses both). client-go has no setting that skips only the
//     name check or only the validity check, so for "SubjectName" and/or
//     "ValidityPeriod" the config gets a WrapTransport that uses its own
//     HTTP transport, dialing with the dialer of the transport it wraps
//     (so a Server's connection tracking closes its connections with the
//     member): it still verifies the server's chain against the CA,
//     and still checks the name unless "SubjectName" is listed; with
//     "ValidityPeriod" a chain that fails as of now is accepted if it
//     verifies as of the middle of the server certificate's validity
//     period. The config's Fingerprint sees that a WrapTransport is set, not
//     which of the two it relaxes: changing only that list between
//     "SubjectName" and "ValidityPeriod" is not noticed as an update.
//
// Problems:
//
//   - A KubeFedCluster whose Secret is missing, has no token, or whose spec
//     is invalid is reported on Errors (naming the KubeFedCluster and the
//     Secret) once the problem has lasted KubeFedOptions.ErrorDelay, and
//     again only if it goes away and comes back. A cluster never published
//     stays out until the problem is fixed, and is then Added.
//   - A cluster already published keeps its last good config while its
//     Secret is missing or broken: a Secret deleted or rewritten by mistake
//     must not stop the controllers of a whole cluster. Removing the
//     KubeFedCluster is what removes a cluster — which is why kubefedctl
//     unjoin, deleting the Secret and then the KubeFedCluster, yields one
//     Deleted event and no error.
//   - When the host does not serve the KubeFedCluster CRD, NewKubeFedWatcher
//     still returns at once; the watcher reports ErrKubeFedNotInstalled on
//     Errors and tries again with a backoff (1s doubling to 30s) until the
//     CRD is installed, then publishes the clusters as Added. Other failures
//     of the host's watches (lost connection, missing permissions) are
//     reported too, the same message at most once a minute, while the cache
//     keeps retrying.
//
// The identity the watcher runs as needs list and watch on
// kubefedclusters.core.kubefed.io and on secrets, in the namespace only.
type KubeFedWatcher struct {
	opts  KubeFedOptions
	log   logr.Logger
	host  string
	pub   *publisher
	cache cache.Cache
	http  *http.Client

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

	// hostErrs maps a host error message to when it was last reported.
	hostErrsMu sync.Mutex
	hostErrs   map[string]time.Time

	// problems belongs to the run goroutine.
	problems map[string]*kubeFedProblem
}

var _ ConfigWatcher = (*KubeFedWatcher)(nil)

// NewKubeFedWatcher watches the KubeFedClusters on the host cluster that
// hostCfg reaches. It does not wait for the host: it returns at once, and
// the watcher publishes the clusters it finds as Added, then every change.
// Call Stop to end it.
func NewKubeFedWatcher(hostCfg *rest.Config, opts ...KubeFedOption) (*KubeFedWatcher, error) {
	if hostCfg == nil {
		return nil, errors.New("configwatcher: NewKubeFedWatcher: host config is nil")
	}
	o, err := newKubeFedOptions(opts)
	if err != nil {
		return nil, err
	}

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("configwatcher: KubeFed scheme: %w", err)
	}
	if err := kubefedv1beta1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("configwatcher: KubeFed scheme: %w", err)
	}
	hostCfg = rest.CopyConfig(hostCfg)
	hc, err := rest.HTTPClientFor(hostCfg)
	if err != nil {
		return nil, fmt.Errorf("configwatcher: KubeFed host %s: %w", hostCfg.Host, err)
	}

	w := &KubeFedWatcher{
		opts:     o,
		log:      o.Logger.WithValues("namespace", o.Namespace),
		host:     hostCfg.Host,
		http:     hc,
		changed:  make(chan struct{}, 1),
		settled:  make(chan struct{}),
		hostErrs: map[string]time.Time{},
		problems: map[string]*kubeFedProblem{},
	}
	w.pub = newPublisher(w.log)
	w.markSettled = sync.OnceFunc(func() { close(w.settled) })
	// The cache makes no request before it is started, so a host that is
	// down or lacks the CRD is found out (and reported) by run.
	w.cache, err = cache.New(hostCfg, cache.Options{
		HTTPClient:               hc,
		Scheme:                   scheme,
		DefaultNamespaces:        map[string]cache.Config{o.Namespace: {}},
		DefaultTransform:         kubeFedTransform,
		DefaultWatchErrorHandler: w.watchError,
		// No ByObject: it makes cache.New ask the host whether each type
		// is namespaced, and New must not wait for the host.
		// Restricted to a namespace, the cache starts a goroutine per
		// informer and per handler registration that waits for its sync
		// checker; an informer stopped before its first list (the host
		// is unreachable, or forbids the list, when the watcher stops)
		// never syncs, and those goroutines would outlive the watcher.
		// The checkers complete once run has seen the cache sync, or the
		// watcher stops.
		NewInformer: syncinformer.Wrap(w.settled, nil, nil),
	})
	if err != nil {
		return nil, fmt.Errorf("configwatcher: KubeFed host %s: %w", hostCfg.Host, err)
	}

	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Go(func() {
		if err := w.cache.Start(w.ctx); err != nil {
			w.pub.report(fmt.Errorf("configwatcher: KubeFed host %s: cache: %w", w.host, err))
		}
	})
	w.wg.Go(w.run)
	return w, nil
}

// Events delivers cluster changes. Read it: events are never dropped, so an
// unread Events channel stalls the watcher once its buffer is full. It is
// closed after Stop.
func (w *KubeFedWatcher) Events() <-chan Event { return w.pub.events }

// Errors delivers problems with the KubeFedClusters, their Secrets and the
// host, each naming what it is about. Reading it is optional: the latest
// errors are buffered and older ones dropped. It is closed after Stop.
func (w *KubeFedWatcher) Errors() <-chan error { return w.pub.errors }

// Stop ends the watcher: it stops the cache and its watches, waits for the
// watcher's goroutines, and closes both channels. Calling it again (or
// concurrently) returns once that is done. It is prompt, except that a
// discovery request already on its way to a host that does not answer is
// waited for, up to client-go's dial and TLS handshake timeouts.
func (w *KubeFedWatcher) Stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.markSettled()
		w.wg.Wait()
		utilnet.CloseIdleConnectionsFor(w.http.Transport)
		w.pub.close()
	})
}

func (w *KubeFedWatcher) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *KubeFedWatcher) run() {
	if !w.startWatching() {
		return
	}
	if !w.cache.WaitForCacheSync(w.ctx) {
		return
	}
	w.markSettled()
	w.log.V(1).Info("watching KubeFedClusters")
	// Since Go 1.23 a stopped or reset timer delivers no stale tick, so the
	// timer needs no draining.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next, ok := w.sync()
		if !ok {
			return
		}
		var wake <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.changed:
		case <-wake:
		}
		timer.Stop()
	}
}

// startWatching sets up the informers for KubeFedClusters and Secrets,
// retrying with a backoff while that fails (typically: the CRD is not
// installed). It returns false when the watcher is stopped meanwhile.
func (w *KubeFedWatcher) startWatching() bool {
	type watched struct {
		kind string
		obj  client.Object
	}
	objs := []watched{{"KubeFedClusters", &kubefedv1beta1.KubeFedCluster{}}, {"Secrets", &corev1.Secret{}}}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	}
	delay := kubeFedRetryFirst
	for len(objs) > 0 {
		inf, err := w.cache.GetInformer(w.ctx, objs[0].obj, cache.BlockUntilSynced(false))
		if err == nil {
			_, err = inf.AddEventHandler(handler)
		}
		if err == nil {
			objs = objs[1:]
			continue
		}
		if w.ctx.Err() != nil {
			return false
		}
		if meta.IsNoMatchError(err) {
			err = fmt.Errorf("%w (%w)", ErrKubeFedNotInstalled, err)
		}
		w.pub.report(fmt.Errorf("configwatcher: KubeFed host %s: watching %s in namespace %s: %w; retrying in %s", w.host, objs[0].kind, w.opts.Namespace, err, delay))
		select {
		case <-w.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, kubeFedRetryLimit)
	}
	return true
}
