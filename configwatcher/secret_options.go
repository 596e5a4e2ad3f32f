package configwatcher

import (
	"fmt"

	"github.com/go-logr/logr"
)

// SecretFormat says how a SecretWatcher reads a cluster out of a Secret.
type SecretFormat int

const (
	// MulticlusterRuntimeFormat is the format of multicluster-runtime's
	// kubeconfig provider: a whole kubeconfig under one data key
	// (SecretOptions.Key), its current context used, the cluster named
	// after the Secret.
	MulticlusterRuntimeFormat SecretFormat = iota
	// ArgoCDSecretFormat is Argo CD's declarative cluster Secret: data keys
	// "name", "server" and "config" (JSON), the cluster named by "name".
	ArgoCDSecretFormat
)

func (f SecretFormat) String() string {
	switch f {
	case MulticlusterRuntimeFormat:
		return "multicluster-runtime"
	case ArgoCDSecretFormat:
		return "Argo CD"
	}
	return fmt.Sprintf("SecretFormat(%d)", int(f))
}

// DefaultSecretNamespace is where a SecretWatcher looks for
// multicluster-runtime kubeconfig Secrets unless told otherwise. Its
// provider has no namespace of its own: its example and its
// create-kubeconfig-secret.sh script write to "default", so that is where
// Secrets made by that tooling are found.
const DefaultSecretNamespace = "default"

// DefaultSecretLabel is the label key that selects multicluster-runtime's
// kubeconfig Secrets, with the value DefaultSecretLabelValue.
const DefaultSecretLabel = "sigs.k8s.io/multicluster-runtime-kubeconfig" //nolint:gosec // a label key, not a credential

// DefaultSecretLabelValue is the value of DefaultSecretLabel on
// multicluster-runtime's kubeconfig Secrets.
const DefaultSecretLabelValue = "true"

// DefaultSecretKey is the data key that holds the kubeconfig in
// multicluster-runtime's format.
const DefaultSecretKey = "kubeconfig"

// DefaultArgoCDNamespace is where Argo CD is installed, and keeps its
// cluster Secrets, unless installed elsewhere.
const DefaultArgoCDNamespace = "argocd"

// ArgoCDSecretLabel is the label key that selects Argo CD's cluster
// Secrets, with the value ArgoCDSecretLabelValue (its repository Secrets
// carry the same key with another value).
const ArgoCDSecretLabel = "argocd.argoproj.io/secret-type" //nolint:gosec // a label key, not a credential

// ArgoCDSecretLabelValue is the value of ArgoCDSecretLabel on Argo CD's
// cluster Secrets.
const ArgoCDSecretLabelValue = "cluster"

// SecretOptions configures a SecretWatcher. The zero value is usable;
// NewSecretWatcher applies the defaults, which depend on Format.
type SecretOptions struct {
	// Format is how Secrets are read. Defaults to MulticlusterRuntimeFormat.
	Format SecretFormat

	// Namespace holds the Secrets; only it is watched. Defaults to
	// DefaultSecretNamespace, or DefaultArgoCDNamespace in the Argo CD
	// format. Ignored with AllNamespaces.
	Namespace string

	// AllNamespaces watches Secrets in every namespace. Off by default: the
	// watcher's identity then needs list and watch on Secrets cluster-wide,
	// and every namespace's writers can add clusters to the fleet. Cluster
	// names must still be unique across namespaces.
	AllNamespaces bool

	// Label and LabelValue select the Secrets (label Label equal to
	// LabelValue). Default to DefaultSecretLabel=DefaultSecretLabelValue,
	// or ArgoCDSecretLabel=ArgoCDSecretLabelValue in the Argo CD format.
	Label, LabelValue string

	// Key is the data key holding the kubeconfig in the multicluster-runtime
	// format. Defaults to DefaultSecretKey.
	Key string

	// AllowAuthPlugins accepts clusters whose credentials run a program:
	// kubeconfig users with exec or auth-provider entries, Argo CD's
	// execProviderConfig and awsAuthConfig. Off by default: whoever can
	// write a Secret in the namespace could otherwise run programs in the
	// controller's process. Set it with AllowAuthPlugins.
	AllowAuthPlugins bool

	// ArgoCDInClusterDisabled refuses, in the Argo CD format, Secrets
	// whose server is ArgoCDInClusterServer (each is reported with
	// ErrArgoCDInClusterDisabled, naming the Secret), as Argo CD does with
	// cluster.inClusterEnabled: "false" in its argocd-cm. By default, as
	// in Argo CD, such a Secret means the cluster Argo CD runs in: the
	// host, reached with the config the watcher was given (see
	// ArgoCDInClusterServer), under the Secret's "name".
	ArgoCDInClusterDisabled bool

	// ArgoCDDeleteOnDeletionStart deletes, in the Argo CD format, a cluster
	// from the fleet as soon as its Secret's deletion starts
	// (metadata.deletionTimestamp set, finalizers pending), rather than
	// once the Secret is gone (the default, which is what Argo CD does).
	ArgoCDDeleteOnDeletionStart bool

	// Logger receives the watcher's errors and, at V(1), every event.
	// Defaults to a logger that discards. Set it with WithLogger.
	Logger logr.Logger
}

// SecretOption sets SecretOptions fields. Besides the options below,
// NewSecretWatcher takes WithLogger and AllowAuthPlugins (see LoggerOption
// and AuthPluginsOption). The FileWatcher's own options (WithDebounce,
// WithLoadOptions, AllowFileReferences) do not compile here: a kubeconfig
// held in a Secret has no directory for file references, which stay
// refused whatever the options.
type SecretOption interface {
	applyToSecret(*SecretOptions) error
}

type secretOptionFunc func(*SecretOptions)

func (f secretOptionFunc) applyToSecret(o *SecretOptions) error {
	f(o)
	return nil
}

// ArgoCDFormat reads Argo CD's cluster Secrets instead of
// multicluster-runtime's kubeconfig Secrets (see SecretWatcher).
func ArgoCDFormat() SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.Format = ArgoCDSecretFormat })
}

// DisableArgoCDInCluster sets SecretOptions.ArgoCDInClusterDisabled.
func DisableArgoCDInCluster() SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.ArgoCDInClusterDisabled = true })
}

// ArgoCDDeleteOnDeletionStart sets SecretOptions.ArgoCDDeleteOnDeletionStart.
func ArgoCDDeleteOnDeletionStart() SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.ArgoCDDeleteOnDeletionStart = true })
}

// WithSecretNamespace sets SecretOptions.Namespace.
func WithSecretNamespace(ns string) SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.Namespace = ns })
}

// WatchAllNamespaces sets SecretOptions.AllNamespaces.
func WatchAllNamespaces() SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.AllNamespaces = true })
}

// WithSecretLabel sets SecretOptions.Label and LabelValue.
func WithSecretLabel(key, value string) SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.Label, o.LabelValue = key, value })
}

// WithSecretKey sets SecretOptions.Key.
func WithSecretKey(key string) SecretOption {
	return secretOptionFunc(func(o *SecretOptions) { o.Key = key })
}

func (o *SecretOptions) applyDefaults() {
	argo := o.Format == ArgoCDSecretFormat
	if o.Namespace == "" {
		o.Namespace = DefaultSecretNamespace
		if argo {
			o.Namespace = DefaultArgoCDNamespace
		}
	}
	if o.Label == "" {
		o.Label, o.LabelValue = DefaultSecretLabel, DefaultSecretLabelValue
		if argo {
			o.Label, o.LabelValue = ArgoCDSecretLabel, ArgoCDSecretLabelValue
		}
	}
	if o.Key == "" {
		o.Key = DefaultSecretKey
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
}

// newSecretOptions applies opts in order over the zero value, then the
// defaults.
func newSecretOptions(opts []SecretOption) (SecretOptions, error) {
	o := SecretOptions{}
	if err := applyOptions(&o, opts, SecretOption.applyToSecret); err != nil {
		return o, err
	}
	switch o.Format {
	case MulticlusterRuntimeFormat, ArgoCDSecretFormat:
	default:
		return o, fmt.Errorf("configwatcher: NewSecretWatcher: unknown %s", o.Format)
	}
	o.applyDefaults()
	return o, nil
}
