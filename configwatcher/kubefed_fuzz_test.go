package configwatcher

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// FuzzKubeFedCluster fuzzes a KubeFedCluster (its JSON: name, spec with
// apiEndpoint, caBundle, secretRef, disabledTLSValidations, proxyURL) and
// the token and ca.crt of the Secret it names. See fuzz_test.go for what
// is checked.
func FuzzKubeFedCluster(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"member-1"},"spec":{"apiEndpoint":"https://127.0.0.1:6443","secretRef":{"name":"member-1-token"}}}`), []byte(fuzzcheck.Token), []byte(""))
	f.Add([]byte(`{"metadata":{"name":"member-1"},"spec":{"apiEndpoint":"127.0.0.1:6443","secretRef":{"name":"s"},"disabledTLSValidations":["SubjectName","ValidityPeriod"],"proxyURL":"http://u:`+fuzzcheck.Password+`@proxy:3128"}}`), []byte(fuzzcheck.Token+"\n"), []byte("-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(`{"metadata":{"name":"member-1"},"spec":{"apiEndpoint":"https://u:`+fuzzcheck.Password+`@h\u007f","secretRef":{"name":"s"},"proxyURL":"://u:`+fuzzcheck.Password+`@p"}}`), []byte(fuzzcheck.Token), []byte(""))
	f.Fuzz(func(t *testing.T, obj, token, ca []byte) {
		var kfc kubefedv1beta1.KubeFedCluster
		if json.Unmarshal(obj, &kfc) != nil {
			return // the host hands over what its schema holds
		}
		o, err := newKubeFedOptions(nil)
		if err != nil {
			t.Fatal(err)
		}
		kfc.Namespace = o.Namespace
		kfc.Name = objectName(kfc.Name, "member")
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: kfc.Spec.SecretRef.Name},
			Data:       map[string][]byte{kubeFedTokenKey: token, kubeFedCAKey: ca, "other": []byte(fuzzcheck.Token)},
		}
		var secrets []*corev1.Secret
		if objectName(secret.Name, "") != "" {
			secrets = append(secrets, secret) // no other name can be in the host
		}
		w := &KubeFedWatcher{hostCache: fuzzHost(kubeFedTransform, secrets...), opts: o, problems: map[string]*kubeFedProblem{}}
		ref := kfc.Namespace + "/" + kfc.Name
		l := newLeakCheck(ref, kfc.Spec.SecretRef.Name, kfc.Namespace+"/"+kfc.Spec.SecretRef.Name)
		l.secrets = append(l.secrets, strings.TrimSpace(string(token)))
		if endpoint := strings.TrimSpace(kfc.Spec.APIEndpoint); strings.Contains(endpoint, "://") {
			l.url(endpoint)
		} else {
			l.url("https://" + endpoint) // as the watcher reads it
		}
		l.url(kfc.Spec.ProxyURL)
		for _, v := range kfc.Spec.DisabledTLSValidations {
			l.public = append(l.public, string(v))
		}

		nc, err := w.namedConfig(&kfc)

		oc := objectClaim{
			source: "KubeFedCluster " + ref, name: kfc.Name, cfg: nc, err: err,
			sentinels: []error{ErrKubeFedClusterInvalid, ErrKubeFedSecretNotFound, ErrKubeFedSecretNoToken},
		}
		oc.check(t, l)
		// Published as the watcher's sync does.
		desired := map[string]*config.NamedConfig{}
		if nc != nil {
			desired[kfc.Name] = nc
		}
		if !w.pub.apply(desired, w.ctx.Done()) {
			t.Fatal("publish: stopped")
		}
		published(t, w.pub, l, oc)
	})
}
