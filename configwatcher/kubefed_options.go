package configwatcher

import (
	"time"

	"github.com/go-logr/logr"
)

// DefaultKubeFedNamespace is where KubeFed keeps its KubeFedClusters and
// their Secrets unless installed elsewhere.
const DefaultKubeFedNamespace = "kube-federation-system"

// DefaultKubeFedErrorDelay is how long a problem with one KubeFedCluster
// must last before a KubeFedWatcher reports it; see KubeFedOptions.ErrorDelay.
const DefaultKubeFedErrorDelay = 2 * time.Second

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
	// Defaults to a logger that discards. Set it with WithLogger.
	Logger logr.Logger
}

// KubeFedOption sets KubeFedOptions fields. Besides the options below,
// NewKubeFedWatcher takes WithLogger (see LoggerOption); the other
// watchers' options do not compile here.
type KubeFedOption interface {
	applyToKubeFed(*KubeFedOptions) error
}

// kubeFedOptionFunc is a KubeFedOption that sets fields directly.
type kubeFedOptionFunc func(*KubeFedOptions)

func (f kubeFedOptionFunc) applyToKubeFed(o *KubeFedOptions) error {
	f(o)
	return nil
}

// WithKubeFedNamespace sets KubeFedOptions.Namespace.
func WithKubeFedNamespace(ns string) KubeFedOption {
	return kubeFedOptionFunc(func(o *KubeFedOptions) { o.Namespace = ns })
}

// RequireReady sets KubeFedOptions.RequireReady.
func RequireReady() KubeFedOption {
	return kubeFedOptionFunc(func(o *KubeFedOptions) { o.RequireReady = true })
}

// WithKubeFedErrorDelay sets KubeFedOptions.ErrorDelay.
func WithKubeFedErrorDelay(d time.Duration) KubeFedOption {
	return kubeFedOptionFunc(func(o *KubeFedOptions) { o.ErrorDelay = d })
}

// WithKubeFedLogger sets KubeFedOptions.Logger, as WithLogger does.
//
// Deprecated: use WithLogger, which every watcher of this package takes.
func WithKubeFedLogger(l logr.Logger) KubeFedOption {
	return WithLogger(l)
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

// newKubeFedOptions applies opts in order over the zero value, then the
// defaults.
func newKubeFedOptions(opts []KubeFedOption) (KubeFedOptions, error) {
	o := KubeFedOptions{}
	if err := applyOptions(&o, opts, KubeFedOption.applyToKubeFed); err != nil {
		return o, err
	}
	o.applyDefaults()
	return o, nil
}
