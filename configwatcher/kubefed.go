package configwatcher

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
)

const (
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
// As in KubeFed, spec.secretRef may name any Secret of the namespace, one
// that another KubeFedCluster uses among them, and that Secret's token goes
// to the spec.apiEndpoint its writer chose: whoever may write
// KubeFedClusters is trusted with the tokens of that namespace's Secrets
// (docs/security.md).
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
//     Errors (again at most once a minute) and tries again every few
//     seconds (2s at most apart, one discovery request each) until the CRD
//     is installed, then publishes the clusters as Added, within seconds of
//     the install; no right on CustomResourceDefinitions is needed. Other failures
//     of the host's watches (lost connection, missing permissions) are
//     reported too, the same message at most once a minute, while the cache
//     keeps retrying.
//
// The identity the watcher runs as needs list and watch on
// kubefedclusters.core.kubefed.io and on secrets, in the namespace only.
type KubeFedWatcher struct {
	hostCache
	opts KubeFedOptions

	// problems belongs to the run goroutine.
	problems map[string]*kubeFedProblem
}

var _ ConfigWatcher = (*KubeFedWatcher)(nil)

// NewKubeFedWatcher watches the KubeFedClusters on the host cluster that
// hostCfg reaches. It does not wait for the host: it returns at once, and
// the watcher publishes the clusters it finds as Added, then every change.
// Call Stop to end it.
func NewKubeFedWatcher(hostCfg *rest.Config, opts ...KubeFedOption) (*KubeFedWatcher, error) {
	o, err := newKubeFedOptions(opts)
	if err != nil {
		return nil, err
	}
	w := &KubeFedWatcher{opts: o, problems: map[string]*kubeFedProblem{}}
	if err := w.init(hostCfg, hostCacheSpec{
		what:       "KubeFed",
		quoteHost:  config.RedactURL,
		log:        o.Logger.WithValues("namespace", o.Namespace),
		schemes:    []func(*runtime.Scheme) error{corev1.AddToScheme, kubefedv1beta1.AddToScheme},
		namespaces: map[string]cache.Config{o.Namespace: {}},
		transform:  kubeFedTransform,
		watched:    []hostWatched{{kind: "KubeFedClusters", obj: &kubefedv1beta1.KubeFedCluster{}}, {kind: "Secrets", obj: &corev1.Secret{}}},
		noMatch:    ErrKubeFedNotInstalled,
		describe: func(kind string, err error) error {
			return fmt.Errorf("configwatcher: KubeFed host %s: watching %s in namespace %s: %w", w.host, kind, o.Namespace, err)
		},
		watching: "watching KubeFedClusters",
		sync:     w.sync,
	}); err != nil {
		return nil, err
	}
	w.start()
	return w, nil
}
