package configwatcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
)

// DefaultKubeFedNamespace is where KubeFed keeps its KubeFedClusters and
// their Secrets unless installed elsewhere.
const DefaultKubeFedNamespace = "kube-federation-system"

// DefaultKubeFedErrorDelay is how long a problem with one KubeFedCluster
// must last before a KubeFedWatcher reports it; see KubeFedOptions.ErrorDelay.
const DefaultKubeFedErrorDelay = 2 * time.Second

const (
	// kubeFedRetryMin and kubeFedRetryMax bound the backoff between attempts
	// to start watching KubeFedClusters (while the CRD is missing, say).
	kubeFedRetryMin = time.Second
	kubeFedRetryMax = 30 * time.Second

	// kubeFedHostErrorInterval is how often the same error from the host
	// cluster (a watch that keeps failing) is reported again while it lasts.
	kubeFedHostErrorInterval = time.Minute

	// Keys read from a KubeFedCluster's Secret.
	kubeFedTokenKey = "token"
	kubeFedCAKey    = "ca.crt"
)

var (
	// ErrKubeFedNotInstalled: the host cluster does not serve the
	// KubeFedCluster CRD (kubefedclusters.core.kubefed.io).
	ErrKubeFedNotInstalled = errors.New("the KubeFedCluster CRD (kubefedclusters.core.kubefed.io) is not installed")
	// ErrKubeFedSecretNotFound: the Secret a KubeFedCluster names does not
	// exist (yet, or any more).
	ErrKubeFedSecretNotFound = errors.New("referenced Secret not found")
	// ErrKubeFedSecretNoToken: the Secret a KubeFedCluster names has no
	// "token" key, or an empty one.
	ErrKubeFedSecretNoToken = errors.New(`referenced Secret has no "token"`)
	// ErrKubeFedClusterInvalid: a KubeFedCluster's spec cannot be turned
	// into a config (no endpoint, a bad proxy URL, a CA bundle without a
	// certificate, an unknown TLS validation).
	ErrKubeFedClusterInvalid = errors.New("invalid KubeFedCluster")
)

// KubeFedOptions configures a KubeFedWatcher. The zero value is usable;
// NewKubeFedWatcher applies the defaults.
type KubeFedOptions struct {
	// Namespace holds the KubeFedClusters and their Secrets. Defaults to
	// DefaultKubeFedNamespace. Only this namespace is watched.
	Namespace string

	// RequireReady publishes only the KubeFedClusters whose Ready condition
	// is True, as reported by KubeFed's own health check: a cluster that is
	// not (yet) Ready is left out, and one that stops being Ready is Deleted
	// until it is Ready again. Off by default: mccr checks the health of
	// every cluster itself and retries, so a cluster KubeFed sees as not
	// Ready is still Added, and its status in mccr tells what is wrong.
	RequireReady bool

	// ErrorDelay is how long a problem with one KubeFedCluster (its Secret
	// missing or without a token, its spec invalid) must last before it is
	// reported on Errors. kubefedctl writes a Secret and then its
	// KubeFedCluster on join, and deletes them in the same order on unjoin;
	// the two are watched separately and either may be seen first for a
	// moment, which is no error. Defaults to DefaultKubeFedErrorDelay; a
	// negative value reports at once.
	ErrorDelay time.Duration

	// Logger receives the watcher's errors and, at V(1), every event.
	// Defaults to a logger that discards.
	Logger logr.Logger
}

// KubeFedOption sets KubeFedOptions fields.
type KubeFedOption func(*KubeFedOptions)

// WithKubeFedNamespace sets KubeFedOptions.Namespace.
func WithKubeFedNamespace(ns string) KubeFedOption {
	return func(o *KubeFedOptions) { o.Namespace = ns }
}

// RequireReady sets KubeFedOptions.RequireReady.
func RequireReady() KubeFedOption {
	return func(o *KubeFedOptions) { o.RequireReady = true }
}

// WithKubeFedErrorDelay sets KubeFedOptions.ErrorDelay.
func WithKubeFedErrorDelay(d time.Duration) KubeFedOption {
	return func(o *KubeFedOptions) { o.ErrorDelay = d }
}

// WithKubeFedLogger sets KubeFedOptions.Logger.
func WithKubeFedLogger(l logr.Logger) KubeFedOption {
	return func(o *KubeFedOptions) { o.Logger = l }
}

func (o *KubeFedOptions) applyDefaults() {
	if o.Namespace == "" {
		o.Namespace = DefaultKubeFedNamespace
	}
	if o.ErrorDelay == 0 {
		o.ErrorDelay = DefaultKubeFedErrorDelay
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
}

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
//     HTTP transport: it still verifies the server's chain against the CA,
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
	// stops; see settledInformer.
	settled     chan struct{}
	markSettled func()

	// hostErrs maps a host error message to when it was last reported.
	hostErrsMu sync.Mutex
	hostErrs   map[string]time.Time

	// problems belongs to the run goroutine.
	problems map[string]*kubeFedProblem
}

var _ ConfigWatcher = (*KubeFedWatcher)(nil)

// kubeFedProblem is a problem with one KubeFedCluster, held back until it
// has lasted ErrorDelay.
type kubeFedProblem struct {
	err      error
	since    time.Time
	reported bool
}

// NewKubeFedWatcher watches the KubeFedClusters on the host cluster that
// hostCfg reaches. It does not wait for the host: it returns at once, and
// the watcher publishes the clusters it finds as Added, then every change.
// Call Stop to end it.
func NewKubeFedWatcher(hostCfg *rest.Config, opts ...KubeFedOption) (*KubeFedWatcher, error) {
	if hostCfg == nil {
		return nil, errors.New("configwatcher: NewKubeFedWatcher: host config is nil")
	}
	o := KubeFedOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	o.applyDefaults()

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
		NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return &settledInformer{
				SharedIndexInformer: toolscache.NewSharedIndexInformer(lw, obj, resync, idx),
				settled:             w.settled,
			}
		},
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
	delay := kubeFedRetryMin
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
			err = fmt.Errorf("%w (%v)", ErrKubeFedNotInstalled, err)
		}
		w.pub.report(fmt.Errorf("configwatcher: KubeFed host %s: watching %s in namespace %s: %w; retrying in %s", w.host, objs[0].kind, w.opts.Namespace, err, delay))
		select {
		case <-w.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, kubeFedRetryMax)
	}
	return true
}

// sync works out the fleet from the cache and publishes it. It returns when
// to look again for problems still held back (zero: no need), and false
// once the watcher is stopped.
func (w *KubeFedWatcher) sync() (time.Time, bool) {
	var list kubefedv1beta1.KubeFedClusterList
	if err := w.cache.List(w.ctx, &list, client.InNamespace(w.opts.Namespace)); err != nil {
		if w.ctx.Err() != nil {
			return time.Time{}, false
		}
		w.pub.report(fmt.Errorf("configwatcher: KubeFed host %s: listing KubeFedClusters: %w", w.host, err))
		return time.Time{}, true
	}
	desired := make(map[string]*config.NamedConfig, len(list.Items))
	problems := map[string]error{}
	for i := range list.Items {
		kfc := &list.Items[i]
		if w.opts.RequireReady && !kubeFedClusterReady(kfc) {
			continue
		}
		nc, err := w.namedConfig(kfc)
		if err == nil {
			desired[kfc.Name] = nc
			continue
		}
		if last, ok := w.pub.published(kfc.Name); ok {
			desired[kfc.Name] = last
			err = fmt.Errorf("%w; keeping its last good config", err)
		}
		problems[kfc.Name] = err
	}
	if !w.pub.apply(desired, w.ctx.Done()) {
		return time.Time{}, false
	}
	return w.reportProblems(problems, time.Now()), true
}

// reportProblems reports each problem once it has lasted ErrorDelay, and
// forgets the problems that are gone. It returns the earliest time a
// problem still held back is due, or zero.
func (w *KubeFedWatcher) reportProblems(now map[string]error, at time.Time) time.Time {
	var next time.Time
	for name := range w.problems {
		if now[name] == nil {
			delete(w.problems, name)
		}
	}
	for name, err := range now {
		p := w.problems[name]
		if p == nil || p.err.Error() != err.Error() {
			p = &kubeFedProblem{err: err, since: at}
			w.problems[name] = p
		}
		if p.reported {
			continue
		}
		due := p.since.Add(w.opts.ErrorDelay)
		if !at.Before(due) {
			w.pub.report(p.err)
			p.reported = true
			continue
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return next
}

// watchError receives the failures of the cache's list and watch calls.
// Those that are part of normal operation are ignored; the others are
// reported, the same message at most once per kubeFedHostErrorInterval,
// since the cache retries on its own.
func (w *KubeFedWatcher) watchError(ctx context.Context, r *toolscache.Reflector, err error) {
	switch {
	case ctx.Err() != nil, w.ctx.Err() != nil,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.Canceled),
		apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return
	}
	err = fmt.Errorf("configwatcher: KubeFed host %s: watching %s in namespace %s: %w", w.host, r.TypeDescription(), w.opts.Namespace, err)
	msg := err.Error()
	now := time.Now()
	w.hostErrsMu.Lock()
	for m, at := range w.hostErrs {
		if now.Sub(at) >= kubeFedHostErrorInterval {
			delete(w.hostErrs, m) // also keeps the map small
		}
	}
	if _, seen := w.hostErrs[msg]; seen {
		err = nil
	} else {
		w.hostErrs[msg] = now
	}
	w.hostErrsMu.Unlock()
	if err != nil {
		w.pub.report(err)
	}
}

// namedConfig builds the config for one KubeFedCluster from the cache.
func (w *KubeFedWatcher) namedConfig(kfc *kubefedv1beta1.KubeFedCluster) (*config.NamedConfig, error) {
	ref := kfc.Namespace + "/" + kfc.Name
	fail := func(err error) error { return fmt.Errorf("configwatcher: KubeFedCluster %s: %w", ref, err) }
	secretName := kfc.Spec.SecretRef.Name
	if secretName == "" {
		return nil, fail(fmt.Errorf("%w: spec.secretRef.name is empty", ErrKubeFedClusterInvalid))
	}
	secretRef := kfc.Namespace + "/" + secretName
	var s corev1.Secret
	if err := w.cache.Get(w.ctx, types.NamespacedName{Namespace: kfc.Namespace, Name: secretName}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fail(fmt.Errorf("Secret %s: %w", secretRef, ErrKubeFedSecretNotFound))
		}
		return nil, fail(fmt.Errorf("reading Secret %s: %w", secretRef, err))
	}
	// Tokens hold no whitespace; a trailing newline from a file is common.
	token := strings.TrimSpace(string(s.Data[kubeFedTokenKey]))
	if token == "" {
		return nil, fail(fmt.Errorf("Secret %s: %w", secretRef, ErrKubeFedSecretNoToken))
	}
	cfg, err := kubeFedRESTConfig(kfc.Spec, token, s.Data[kubeFedCAKey])
	if err != nil {
		return nil, fail(err)
	}
	return &config.NamedConfig{
		Name:   kfc.Name,
		Config: cfg,
		Source: config.Source{Object: "KubeFedCluster " + ref},
	}, nil
}

func kubeFedClusterReady(kfc *kubefedv1beta1.KubeFedCluster) bool {
	for _, c := range kfc.Status.Conditions {
		if c.Type == kubefedv1beta1.ClusterReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kubeFedTransform trims objects before they enter the cache: managed
// fields go, and Secrets keep only what the watcher reads, so that other
// credentials in the namespace are not held in memory.
func kubeFedTransform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if s, ok := obj.(*corev1.Secret); ok {
		for k := range s.Data {
			if k != kubeFedTokenKey && k != kubeFedCAKey {
				delete(s.Data, k)
			}
		}
		s.StringData = nil
	}
	return obj, nil
}

// kubeFedRESTConfig turns a KubeFedCluster's spec and its Secret's token
// (and ca.crt, used when the spec has no CA bundle) into a rest.Config, as
// the KubeFedWatcher doc describes.
func kubeFedRESTConfig(spec kubefedv1beta1.KubeFedClusterSpec, token string, secretCA []byte) (*rest.Config, error) {
	u, err := kubeFedEndpoint(spec.APIEndpoint)
	if err != nil {
		return nil, err
	}
	ca, caFrom := spec.CABundle, "spec.caBundle"
	if len(ca) == 0 {
		ca, caFrom = secretCA, "the Secret's "+kubeFedCAKey
	}
	var roots *x509.CertPool
	if len(ca) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrKubeFedClusterInvalid, caFrom)
		}
	}
	cfg := &rest.Config{
		Host:            u.String(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	}
	proxy := http.ProxyFromEnvironment
	if spec.ProxyURL != "" {
		pu, err := url.Parse(spec.ProxyURL)
		if err != nil || pu.Scheme == "" || pu.Host == "" {
			return nil, fmt.Errorf("%w: spec.proxyURL %q is not an absolute URL", ErrKubeFedClusterInvalid, spec.ProxyURL)
		}
		proxy = http.ProxyURL(pu)
		cfg.Proxy = proxy
	}

	var skipAll, skipName, skipValidity bool
	for _, v := range spec.DisabledTLSValidations {
		switch v {
		case kubefedv1beta1.TLSAll:
			skipAll = true
		case kubefedv1beta1.TLSSubjectName:
			skipName = true
		case kubefedv1beta1.TLSValidityPeriod:
			skipValidity = true
		default:
			return nil, fmt.Errorf("%w: spec.disabledTLSValidations: unknown value %q", ErrKubeFedClusterInvalid, v)
		}
	}
	switch {
	case skipAll:
		cfg.Insecure = true
		cfg.CAData = nil
	case skipName || skipValidity:
		cfg.WrapTransport = relaxedTLSTransport(u.Hostname(), roots, proxy, skipName, skipValidity)
	}
	return cfg, nil
}

// kubeFedEndpoint parses spec.apiEndpoint, which KubeFed allows to be a
// hostname, hostname:port, IP or IP:port as well as a URL. Without a scheme
// it is https: left to client-go, a host without a scheme and without a CA
// would be spoken to over plain http, bearer token included.
func kubeFedEndpoint(endpoint string) (*url.URL, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" {
		return nil, fmt.Errorf("%w: spec.apiEndpoint is empty", ErrKubeFedClusterInvalid)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("%w: spec.apiEndpoint %q is not a host or an http(s) URL", ErrKubeFedClusterInvalid, endpoint)
	}
	return u, nil
}

// relaxedTLSTransport returns a WrapTransport that replaces client-go's
// transport with one whose TLS verification skips only what KubeFed asked
// to skip. client-go's transport cannot be adjusted in place: it is shared
// between configs with the same TLS settings (and so must not be mutated),
// and a clone would still hand its HTTP/2 connections to the original's
// pool. The replacement ignores the wrapped transport and rebuilds what it
// provided: the proxy and the usual timeouts.
func relaxedTLSTransport(serverName string, roots *x509.CertPool, proxy func(*http.Request) (*url.URL, error), skipName, skipValidity bool) func(http.RoundTripper) http.RoundTripper {
	return func(http.RoundTripper) http.RoundTripper {
		return &http.Transport{
			Proxy: proxy,
			DialContext: (&net.Dialer{
				Timeout:   30 * time.Second,
				KeepAlive: 30 * time.Second,
			}).DialContext,
			TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS12,
				// Go's own verification cannot be told to skip only one
				// check; VerifyConnection does the verification instead.
				InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection
				VerifyConnection: func(cs tls.ConnectionState) error {
					return verifyRelaxed(cs.PeerCertificates, roots, serverName, skipName, skipValidity)
				},
			},
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: 10 * time.Second,
			IdleConnTimeout:     90 * time.Second,
			MaxIdleConnsPerHost: 25,
		}
	}
}

// verifyRelaxed verifies a server's certificate chain against roots (nil:
// the system's), checking the name unless skipName, and accepting a chain
// outside its validity period if skipValidity and it verifies as of the
// middle of the server certificate's validity.
func verifyRelaxed(certs []*x509.Certificate, roots *x509.CertPool, serverName string, skipName, skipValidity bool) error {
	if len(certs) == 0 {
		return errors.New("tls: server presented no certificate")
	}
	leaf := certs[0]
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if !skipName {
		opts.DNSName = serverName
	}
	_, err := leaf.Verify(opts)
	if err == nil || !skipValidity {
		return err
	}
	opts.CurrentTime = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	_, err = leaf.Verify(opts)
	return err
}

// settledInformer works around a goroutine leak in controller-runtime's
// cache. Restricted to a namespace, the cache wraps each informer, and each
// event handler registration, with one that starts a goroutine waiting for
// HasSyncedChecker().Done(). An informer stopped before its first list
// (the host is unreachable, or forbids the list, when the watcher stops)
// never syncs, and those goroutines would outlive the watcher. Here that
// checker, and the one of every registration, completes once the watcher
// has seen its cache sync, or stops. Nothing else uses these checkers:
// HasSynced, which the cache's own sync waits use, is left as it is.
type settledInformer struct {
	toolscache.SharedIndexInformer
	settled <-chan struct{}
}

func (i *settledInformer) HasSyncedChecker() toolscache.DoneChecker {
	return settledChecker{name: i.SharedIndexInformer.HasSyncedChecker().Name(), done: i.settled}
}

func (i *settledInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandler(h))
}

func (i *settledInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (i *settledInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.wrap(i.SharedIndexInformer.AddEventHandlerWithOptions(h, o))
}

func (i *settledInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	if sr, ok := r.(settledRegistration); ok {
		r = sr.ResourceEventHandlerRegistration
	}
	return i.SharedIndexInformer.RemoveEventHandler(r)
}

func (i *settledInformer) wrap(r toolscache.ResourceEventHandlerRegistration, err error) (toolscache.ResourceEventHandlerRegistration, error) {
	if err != nil {
		return r, err
	}
	return settledRegistration{ResourceEventHandlerRegistration: r, settled: i.settled}, nil
}

type settledRegistration struct {
	toolscache.ResourceEventHandlerRegistration
	settled <-chan struct{}
}

func (r settledRegistration) HasSyncedChecker() toolscache.DoneChecker {
	return settledChecker{name: r.ResourceEventHandlerRegistration.HasSyncedChecker().Name(), done: r.settled}
}

type settledChecker struct {
	name string
	done <-chan struct{}
}

func (c settledChecker) Name() string          { return c.name }
func (c settledChecker) Done() <-chan struct{} { return c.done }
