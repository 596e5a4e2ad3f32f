package configwatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fuzzcheck"
)

// The fuzz targets of this package feed each watcher's reading of one
// object — SecretWatcher.claim in both formats, ClusterProfileWatcher.claim,
// KubeFedWatcher.namedConfig, ClusterAPIWatcher.claim — with objects built
// from fuzzed bytes, as the host's cache would hand them over (through the
// watcher's transform), and then publish what they read the way the
// watcher's sync does. They call the readers directly, without the
// recovery the watchers' sync loops add around them: a panic on an object
// is a bug to fix, not only a failure to contain. Whatever the object:
//
//   - nothing panics;
//   - an object either yields a usable config (a server that is a URL, TLS
//     settings that load, no file for client-go to read, no auth plugin
//     unless allowed) sourced from the object, or an error that names the
//     object ("Secret ns/name") and wraps the watcher's sentinels;
//   - no message, nor what a config says of itself, quotes a credential of
//     the object, and every message is one printable line;
//   - a cluster whose name config.ValidateName refuses is never published:
//     it is reported, naming the object.

// fuzzCache stands for the host's cache where a reader looks up a Secret.
type fuzzCache struct {
	cache.Cache // nil: only Get is used
	secrets     []*corev1.Secret
}

func (c fuzzCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, s := range c.secrets {
		if s.Namespace == key.Namespace && s.Name == key.Name {
			s.DeepCopyInto(obj.(*corev1.Secret))
			return nil
		}
	}
	return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
}

// fuzzLive is a host read past the cache (hostCache.live): every object
// the cache holds is there as it is, or, gone, none is.
type fuzzLive struct {
	client.Reader // nil: only Get is used
	gone          bool
}

func (l fuzzLive) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	if l.gone {
		return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
	}
	return nil // obj, a copy of the cached object, is what the host has
}

// fuzzHost is a hostCache with nothing started: a publisher, a context, a
// cache holding secrets, transformed by transform as they would be, and a
// host that has every object the cache has (fuzzLive).
func fuzzHost(transform func(any) (any, error), secrets ...*corev1.Secret) hostCache {
	for _, s := range secrets {
		if transform != nil {
			if _, err := transform(s); err != nil {
				panic(err)
			}
		}
	}
	return hostCache{
		log:   logr.Discard(),
		pub:   newPublisher(logr.Discard()),
		cache: fuzzCache{secrets: secrets},
		live:  fuzzLive{},
		ctx:   context.Background(),
	}
}

// objectName is name if the API server would accept it for an object, and
// fallback otherwise: names come from the host, which validates them.
func objectName(name, fallback string) string {
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	return fallback
}

// leakCheck is what may and may not appear in messages about one object.
type leakCheck struct {
	secrets, public []string
}

func newLeakCheck(public ...string) *leakCheck {
	return &leakCheck{
		secrets: []string{fuzzcheck.Token, fuzzcheck.Password, fuzzcheck.KeyBody, fuzzcheck.EnvValue},
		public:  public,
	}
}

// kubeconfig adds what a kubeconfig holds, if it parses.
func (l *leakCheck) kubeconfig(data []byte) {
	if raw, err := clientcmd.Load(data); err == nil {
		s, p := fuzzcheck.Kubeconfig(raw)
		l.secrets, l.public = append(l.secrets, s...), append(l.public, p...)
	}
}

// url adds a server or proxy address: its userinfo is secret, the rest is
// what a message may quote.
func (l *leakCheck) url(raw string) {
	l.secrets = append(l.secrets, fuzzcheck.URLSecrets(raw)...)
	l.public = append(l.public, fuzzcheck.WithoutUserinfo(raw))
}

// message fails t if msg quotes a credential or is not one printable line.
func (l *leakCheck) message(t *testing.T, what, msg string) {
	t.Helper()
	if err := fuzzcheck.OneLine(msg); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if s, ok := fuzzcheck.Leak(msg, l.secrets, l.public); ok {
		t.Fatalf("%s quotes the credential %q: %s", what, s, msg)
	}
}

// objectClaim is what a reader made of one object, to check.
type objectClaim struct {
	// source is the object as messages name it: "Secret ns/name".
	source string
	// name, cfg and err are what the reader returned.
	name string
	cfg  *config.NamedConfig
	err  error
	// sentinels are the errors a failure may wrap (one of them).
	sentinels []error
	// plugins says whether the config may run a program.
	plugins bool
}

// check applies the invariants to one object's reading.
func (o objectClaim) check(t *testing.T, l *leakCheck) {
	t.Helper()
	if o.err != nil {
		if o.cfg != nil {
			t.Fatalf("%s: both a config and an error: %v", o.source, o.err)
		}
		msg := o.err.Error()
		if !strings.Contains(msg, o.source) {
			t.Fatalf("error does not name %s: %s", o.source, msg)
		}
		if !slices.ContainsFunc(o.sentinels, func(s error) bool { return errors.Is(o.err, s) }) {
			t.Fatalf("%s: error wraps none of %v: %s", o.source, o.sentinels, msg)
		}
		l.message(t, "error", msg)
		l.message(t, "reported error", config.RedactError(o.err).Error())
		return
	}
	if o.cfg == nil {
		return
	}
	c := o.cfg
	if c.Name != o.name || c.Config == nil || c.Source != (config.Source{Object: o.source}) {
		t.Fatalf("%s: config %q (want %q) from %+v", o.source, c.Name, o.name, c.Source)
	}
	cfg := c.Config
	if _, _, err := rest.DefaultServerUrlFor(cfg); err != nil {
		t.Fatalf("%s: server accepted that is no URL: %v", o.source, err)
	}
	if _, err := rest.TLSConfigFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig}); err != nil {
		t.Fatalf("%s: TLS settings accepted that do not load: %v", o.source, err)
	}
	if cfg.BearerTokenFile != "" || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" {
		t.Fatalf("%s: a file left for client-go to read: token %q, TLS %+v", o.source, cfg.BearerTokenFile, cfg.TLSClientConfig)
	}
	if !o.plugins && (cfg.ExecProvider != nil || cfg.AuthProvider != nil) {
		t.Fatalf("%s: auth plugin accepted without AllowAuthPlugins", o.source)
	}
	if e := cfg.ExecProvider; e != nil {
		if e.Command == "" || (e.APIVersion != "client.authentication.k8s.io/v1" && e.APIVersion != "client.authentication.k8s.io/v1beta1") {
			t.Fatalf("%s: exec plugin client-go would refuse: command %q, apiVersion %q", o.source, e.Command, e.APIVersion)
		}
	}
	l.message(t, "config description", c.Redacted())
	_ = c.Fingerprint()
}

// published checks what a publisher did with the readings just applied:
// every event names a valid cluster name, a refused name was reported
// naming its source, and every report is a clean line.
func published(t *testing.T, pub *publisher, l *leakCheck, claims ...objectClaim) {
	t.Helper()
	events := map[string]bool{}
	for more := true; more; {
		select {
		case ev := <-pub.events:
			if err := config.ValidateName(ev.Config.Name); err != nil {
				t.Fatalf("published %s: %v", ev.Type, err)
			}
			events[ev.Config.Name] = true
		default:
			more = false
		}
	}
	var reports []error
	for more := true; more; {
		select {
		case err := <-pub.errors:
			l.message(t, "report", err.Error())
			reports = append(reports, err)
		default:
			more = false
		}
	}
	for _, o := range claims {
		if o.cfg == nil || config.ValidateName(o.name) == nil {
			continue
		}
		if events[o.name] {
			t.Fatalf("%s: invalid name %s published", o.source, config.QuoteName(o.name))
		}
		if !slices.ContainsFunc(reports, func(err error) bool {
			return errors.Is(err, config.ErrInvalidName) && strings.Contains(err.Error(), o.source)
		}) {
			t.Fatalf("%s: invalid name %s not reported naming it; reports: %v", o.source, config.QuoteName(o.name), reports)
		}
	}
}

// publishClaims publishes claims as a watcher's sync does.
func publishClaims(t *testing.T, h *hostCache, claims ...*claim) {
	t.Helper()
	st := newClaimsState()
	if !st.publish(h, claims, func(c, owner *claim) error {
		return fmt.Errorf("duplicate %s of %s", c.ref, owner.ref)
	}) {
		t.Fatal("publish: stopped")
	}
}
