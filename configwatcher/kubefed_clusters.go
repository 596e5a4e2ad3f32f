package configwatcher

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/safe"
)

// sync works out the fleet from the cache and publishes it. It returns when
// to look again for problems still held back (zero: no need), and false
// once the watcher is stopped.
func (w *KubeFedWatcher) sync() (time.Time, bool) {
	var list kubefedv1beta1.KubeFedClusterList
	if listed, running := w.list("KubeFedClusters", &list, client.InNamespace(w.opts.Namespace)); !listed {
		return time.Time{}, running
	}
	desired := make(map[string]*config.NamedConfig, len(list.Items))
	problems := map[string]error{}
	for i := range list.Items {
		kfc := &list.Items[i]
		if w.opts.RequireReady && !kubeFedClusterReady(kfc) {
			continue
		}
		var nc *config.NamedConfig
		err := safe.Call(w.log, "configwatcher: KubeFedCluster "+kfc.Namespace+"/"+kfc.Name, func() (err error) {
			nc, err = w.namedConfig(kfc)
			return err
		})
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

// namedConfig builds the config for one KubeFedCluster from the cache.
func (w *KubeFedWatcher) namedConfig(kfc *kubefedv1beta1.KubeFedCluster) (*config.NamedConfig, error) {
	ref := kfc.Namespace + "/" + kfc.Name
	fail := func(err error) error { return fmt.Errorf("configwatcher: KubeFedCluster %s: %w", ref, err) }
	secretName := kfc.Spec.SecretRef.Name
	switch {
	case secretName == "":
		return nil, fail(fmt.Errorf("%w: spec.secretRef.name is empty", ErrKubeFedClusterInvalid))
	case len(validation.IsDNS1123Subdomain(secretName)) > 0:
		// No such Secret can exist, and the name, any string, is not
		// printed as it is.
		return nil, fail(fmt.Errorf("%w: spec.secretRef.name %s is not a Secret name", ErrKubeFedClusterInvalid, config.QuoteName(secretName)))
	}
	secretRef := kfc.Namespace + "/" + secretName
	var s corev1.Secret
	if err := w.cache.Get(w.ctx, types.NamespacedName{Namespace: kfc.Namespace, Name: secretName}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fail(fmt.Errorf("its Secret %s: %w", secretRef, ErrKubeFedSecretNotFound))
		}
		return nil, fail(fmt.Errorf("reading Secret %s: %w", secretRef, err))
	}
	// Tokens hold no whitespace; a trailing newline from a file is common.
	token := strings.TrimSpace(string(s.Data[kubeFedTokenKey]))
	if token == "" {
		return nil, fail(fmt.Errorf("its Secret %s: %w", secretRef, ErrKubeFedSecretNoToken))
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
// credentials in the namespace are not held in memory: their token and CA
// data, and no annotation (kubectl's last-applied-configuration, on a
// Secret made with kubectl apply, holds the whole Secret).
func kubeFedTransform(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if s, ok := obj.(*corev1.Secret); ok {
		s.Annotations = nil
		for k := range s.Data {
			if k != kubeFedTokenKey && k != kubeFedCAKey {
				delete(s.Data, k)
			}
		}
		s.StringData = nil
	}
	return obj, nil
}
