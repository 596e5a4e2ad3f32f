package configwatcher_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	capicrd "github.com/mccr-dev/mccr/apis/clusterapi/crd"
	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// hostileLong is a name far past config.MaxNameLength, as a Secret's data
// or a profile's property may hold: whatever quotes it must cut it.
var hostileLong = strings.Repeat("y", 100_000)

// TestHostileNamesThroughServer: one Server on real API servers, fed at
// once by every kind of watcher, each given objects shaped as their owners
// write them, some of which name their cluster with what no cluster name
// may be: bytes that are not UTF-8, line breaks, bidi overrides,
// zero-width characters, a leading space, a name of 100 000 bytes — and
// naming functions that panic. Each such object is a watch error naming
// it (namespace/name, or the file), with the name escaped and cut; every
// other cluster of every watcher joins and runs; Server.Add, Update,
// Delete, Status, GetManager and the fan-out client take hostile names
// without harm; and the host Manager's /metrics endpoint still answers,
// in valid UTF-8, naming only the good clusters.
func TestHostileNamesThroughServer(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	e := newSecretEnv(t, "hx-host", "hx-member")
	ctx := t.Context()
	installClusterProfileCRD(t, e.host.Config)
	installCRD(t, e.host.Config, capicrd.Cluster)
	kfCRDs, err := test.KubeFedCRDPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := test.InstallCRDs(e.host.Config, kfCRDs); err != nil {
		t.Fatal(err)
	}
	cp := &clusterProfileEnv{host: e.host, member: e.member, hostClient: e.hostClient, dir: t.TempDir(), token: e.token}
	cp.plugin = buildExecPlugin(t)
	cp.providersFile = filepath.Join(cp.dir, "providers.json")
	cp.writeProviders(t, cp.providersFile)
	capi := &clusterAPIEnv{secretEnv: e}

	// Who says what. want lists the clusters that must join; refused, the
	// sources whose hostile object must be a watch error, by what the
	// error must name.
	nsArgo, nsMCR, nsCP, nsCAPI, nsKF := e.namespace(t), e.namespace(t), e.namespace(t), e.namespace(t), e.namespace(t)
	type refusal struct {
		source string
		target error
	}
	var want []string
	var refused []refusal

	// Argo CD cluster Secrets: "name", "server" and "config" as
	// `argocd cluster add` writes them.
	argo := func(secret, name string, server string) {
		e.create(t, nsArgo, secret, argoLabel, map[string][]byte{
			"name":   []byte(name),
			"server": []byte(server),
			"config": e.argoConfig(t, e.token, nil),
		})
	}
	argo("argo-good", "argo-good", e.member.Config.Host)
	want = append(want, "argo-good")
	for secret, name := range map[string]string{
		"argo-ff":   "evil-\xff\xfe",
		"argo-nl":   "prod\nlevel=error msg=forged",
		"argo-rtl":  "prod\u202egpj.exe",
		"argo-zw":   "pr\u200bod",
		"argo-nul":  "nul\x00",
		"argo-esc":  "esc\x1b[2J",
		"argo-long": hostileLong,
	} {
		argo(secret, name, e.member.Config.Host)
		refused = append(refused, refusal{"Secret " + nsArgo + "/" + secret, config.ErrInvalidName})
	}
	// Two Secrets claiming one hostile name (each refused for it: a name
	// that is refused claims nothing, so they are no duplicates), and one
	// whose long name comes with a broken server: the messages about them
	// quote the name cut.
	argo("argo-dup-1", hostileLong+"z", e.member.Config.Host)
	argo("argo-dup-2", hostileLong+"z", e.member.Config.Host)
	argo("argo-broken", hostileLong+"b", "not a URL")
	refused = append(refused,
		refusal{"Secret " + nsArgo + "/argo-dup-1", config.ErrInvalidName},
		refusal{"Secret " + nsArgo + "/argo-dup-2", config.ErrInvalidName},
		refusal{"Secret " + nsArgo + "/argo-broken", configwatcher.ErrSecretInvalid})

	// A multicluster-runtime kubeconfig Secret: its cluster is named after
	// the Secret (a DNS name), never after the kubeconfig's context, so a
	// hostile context name is harmless.
	kc := test.KubeconfigFor("member", test.TokenConfig(e.member.Config, e.token))
	kc.Contexts["a\nb\u202e"] = kc.Contexts["member"]
	delete(kc.Contexts, "member")
	kc.CurrentContext = "a\nb\u202e"
	kcData, err := clientcmd.Write(kc)
	if err != nil {
		t.Fatal(err)
	}
	e.create(t, nsMCR, "mcr-hostile-context", mcrLabel, map[string][]byte{"kubeconfig": kcData})
	want = append(want, "mcr-hostile-context")

	// A watched directory of kubeconfigs.
	dir := t.TempDir()
	writeContexts := func(file string, names ...string) {
		t.Helper()
		kc := test.KubeconfigFor("member", test.TokenConfig(e.member.Config, e.token))
		for _, n := range names {
			kc.Contexts[n] = kc.Contexts["member"]
		}
		delete(kc.Contexts, "member")
		kc.CurrentContext = ""
		data, err := clientcmd.Write(kc)
		if err != nil {
			t.Fatal(err)
		}
		// Bytes that are not UTF-8 survive no encoder: put them in by hand.
		data = bytes.ReplaceAll(data, []byte("INVALID-UTF8"), []byte("\xff\xfe"))
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeContexts("good.yaml", "file-good")
	writeContexts("line-break.yaml", "a\nb")
	writeContexts("mixed.yaml", "file-good-2", "x\u202ey") // one good context, one hostile
	writeContexts("not-utf8.yaml", "evil-INVALID-UTF8")
	writeContexts("odd\nfile\u202e.yaml", "zw\u200b")
	want = append(want, "file-good", "file-good-2")
	refused = append(refused,
		refusal{filepath.Join(dir, "line-break.yaml"), config.ErrInvalidName},
		refusal{filepath.Join(dir, "mixed.yaml"), config.ErrInvalidName},
		refusal{filepath.Join(dir, "not-utf8.yaml"), config.ErrInvalidKubeconfig},
		refusal{strconv.Quote(filepath.Join(dir, "odd\nfile\u202e.yaml")), config.ErrInvalidName})

	// ClusterProfiles named by their cluster ID property (a built-in
	// naming function, fed by whoever writes the profile's status), and
	// by a naming function of the program's that returns bytes that are
	// not UTF-8 for one profile and panics on another.
	cpName := func(id configwatcher.ClusterProfileIdentity) string {
		switch id.Name {
		case "cp-ff":
			return "evil-\xff\xfe"
		case "cp-panic":
			panic("naming function bug on " + id.Name)
		}
		return configwatcher.ClusterProfileClusterID(id)
	}
	profile := func(name, clusterID string) {
		cp.writeToken(t, name, e.token, 0)
		createClusterProfile(t, e.hostClient, nsCP, name, nil,
			cpStatus("True", map[string]string{configwatcher.ClusterIDProperty: clusterID}, cp.access(cpTokenFile, name, nil)))
	}
	profile("cp-good", "cp-good")
	want = append(want, "cp-good")
	for name, id := range map[string]string{
		"cp-rtl":   "rtl\u202egpj.exe",
		"cp-nl":    "a\nb",
		"cp-pad":   " padded",
		"cp-zw":    "zw\u200b",
		"cp-long":  hostileLong[:1024], // the upstream CRD's longest property value
		"cp-ff":    "ignored",
		"cp-panic": "ignored",
	} {
		profile(name, id)
		target := config.ErrInvalidName
		if name == "cp-panic" {
			target = configwatcher.ErrPanic
		}
		refused = append(refused, refusal{"ClusterProfile " + nsCP + "/" + name, target})
	}

	// Cluster API Clusters, named by the program's function, which returns
	// a hostile name for one and panics on another.
	capiName := func(ns, name string) string {
		switch name {
		case "capi-evil":
			return "capi\xff\n"
		case "capi-panic":
			panic("naming function bug on " + name)
		}
		return configwatcher.DefaultClusterAPIName(ns, name)
	}
	for _, name := range []string{"capi-good", "capi-evil", "capi-panic"} {
		capi.join(t, nsCAPI, name, e.token)
	}
	want = append(want, nsCAPI+"/capi-good")
	refused = append(refused,
		refusal{"Cluster " + nsCAPI + "/capi-evil", config.ErrInvalidName},
		refusal{"Cluster " + nsCAPI + "/capi-panic", configwatcher.ErrPanic})

	// KubeFed: a KubeFedCluster's name is its cluster's, and the API
	// server allows only DNS names for it.
	if _, err := test.JoinKubeFed(ctx, e.host.Config, nsKF, "kf-good", e.member.Config, e.token); err != nil {
		t.Fatal(err)
	}
	want = append(want, "kf-good")
	for _, name := range []string{"kf\u202eevil", "a\nb", "Upper", "kf evil", "kf_evil", "-kf", strings.Repeat("k", 254)} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
			"metadata": map[string]any{"namespace": nsKF, "name": name},
			"spec":     map[string]any{"apiEndpoint": e.member.Config.Host, "secretRef": map[string]any{"name": "kf-good"}},
		}}
		if err := e.hostClient.Create(ctx, u); !apierrors.IsInvalid(err) {
			t.Errorf("creating a KubeFedCluster named %q: %v, want the API server to refuse it as invalid", name, err)
		}
	}

	// The Server, fed by all of them at once.
	metricsAddr := test.FreeAddress(t)
	srv, err := mccrserver.NewServer(e.host.Config, ctrl.Options{
		Logger:                 testr.New(t),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("hostile-names").For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	})
	watch := func(w configwatcher.ConfigWatcher, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		srv.Watch(w)
	}
	log := configwatcher.WithLogger(testr.New(t))
	watch(configwatcher.NewSecretWatcher(e.host.Config, configwatcher.ArgoCDFormat(), configwatcher.WithSecretNamespace(nsArgo), log))
	watch(configwatcher.NewSecretWatcher(e.host.Config, configwatcher.WithSecretNamespace(nsMCR), log))
	watch(configwatcher.NewFileWatcher(dir, log))
	watch(configwatcher.NewClusterProfileWatcher(e.host.Config, configwatcher.WithAccessProvidersFile(cp.providersFile),
		configwatcher.WithClusterProfileNamespaces(nsCP), configwatcher.WithClusterProfileName(cpName), log))
	watch(configwatcher.NewClusterAPIWatcher(e.host.Config, configwatcher.WithClusterAPINamespaces(nsCAPI),
		configwatcher.WithClusterAPIName(capiName), log))
	watch(configwatcher.NewKubeFedWatcher(e.host.Config, configwatcher.WithKubeFedNamespace(nsKF), log))
	test.Run(t, srv)

	for _, name := range want {
		test.Eventually(t, 90*time.Second, name+" Ready", func() bool {
			st, err := srv.Status(name)
			return err == nil && st.Phase == mccrserver.PhaseReady
		})
	}
	for _, r := range refused {
		test.Eventually(t, 30*time.Second, "a watch error naming "+r.source, func() bool {
			return watchErrorNaming(srv, r.target, r.source) != nil
		})
	}
	checkWatchErrorsClean(t, srv)
	if got := srv.ClusterNames(); len(got) != len(want) {
		t.Errorf("ClusterNames = %q, want exactly %q", got, want)
	}

	// Server.Add and the calls by name, with the same names by hand.
	hostile := []string{"evil-\xff\xfe", "a\nb", "rtl\u202e", "zw\u200b", " padded", "padded ", "nul\x00", hostileLong, ""}
	for _, name := range hostile {
		nc := config.NewNamedConfig(name, test.TokenConfig(e.member.Config, e.token))
		if err := srv.Add(nc); !errors.Is(err, config.ErrInvalidName) || !errors.Is(err, mccrserver.ErrInvalidConfig) {
			t.Errorf("Add(%s) = %v, want ErrInvalidConfig wrapping ErrInvalidName", config.QuoteName(name), err)
		}
		if err := srv.Update(nc); !errors.Is(err, config.ErrInvalidName) {
			t.Errorf("Update(%s) = %v, want ErrInvalidName", config.QuoteName(name), err)
		}
		for call, err := range map[string]error{
			"Delete": srv.Delete(name),
			"Status": func() error { _, err := srv.Status(name); return err }(),
			"GetManager": func() error {
				_, err := srv.GetManager(name)
				return err
			}(),
			"fan-out Get": srv.GetClient().Get(known.WithCluster(ctx, name), client.ObjectKey{Namespace: "default", Name: "x"}, &corev1.ConfigMap{}),
		} {
			switch {
			case name == "" && call == "fan-out Get":
				if !errors.Is(err, mcclient.ErrNoClusterInContext) {
					t.Errorf("%s(\"\") = %v, want ErrNoClusterInContext", call, err)
				}
			case !errors.Is(err, mccrserver.ErrClusterNotFound):
				t.Errorf("%s(%s) = %v, want ErrClusterNotFound", call, config.QuoteName(name), err)
			}
			// The caller's own name comes back in the error: escaped, if
			// not cut.
			if err != nil && (!utf8.ValidString(err.Error()) || strings.ContainsAny(err.Error(), "\n\x00\u202e\u200b")) {
				t.Errorf("%s(%s): error %q carries raw bytes of the name", call, config.QuoteName(name), err.Error()[:min(len(err.Error()), 200)])
			}
		}
	}
	for _, name := range want {
		if st, err := srv.Status(name); err != nil || st.Phase != mccrserver.PhaseReady || st.Restarts != 0 {
			t.Errorf("%s: phase %s, %d restarts, error %v; the hostile input should not have touched it", name, st.Phase, st.Restarts, err)
		}
	}

	// A name the gate lets through with what the metrics text format must
	// escape in a label value.
	odd := `we"ird\name}{,=` + "é🚀"
	if err := srv.Add(config.NewNamedConfig(odd, test.TokenConfig(e.member.Config, e.token))); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 90*time.Second, "the odd name Ready", func() bool {
		st, err := srv.Status(odd)
		return err == nil && st.Phase == mccrserver.PhaseReady
	})

	// The metrics endpoint, scraped as Prometheus does.
	body := scrapeMetrics(t, metricsAddr)
	if !bytes.Contains(body, []byte(`mccr_cluster_ready{cluster="we\"ird\\name}{,=`+"é🚀"+`"} 1`)) {
		t.Error("/metrics has no mccr_cluster_ready 1 for the odd name, escaped")
	}
	if !utf8.Valid(body) {
		t.Error("/metrics answered with bytes that are not UTF-8")
	}
	for _, name := range want {
		if !bytes.Contains(body, []byte(`mccr_cluster_ready{cluster="`+name+`"} 1`)) {
			t.Errorf("/metrics has no mccr_cluster_ready 1 for %s", name)
		}
	}
	for _, bad := range []string{"evil", "padded", "gpj", "\u202e", "\u200b", "yyyyyyyy"} {
		if bytes.Contains(body, []byte(bad)) {
			t.Errorf("/metrics mentions %q", bad)
		}
	}
}

// watchErrorNaming returns the first of srv's watch errors that wraps
// target and names source.
func watchErrorNaming(srv *mccrserver.Server, target error, source string) error {
	for _, we := range srv.WatchErrors() {
		if errors.Is(we.Err, target) && strings.Contains(we.Err.Error(), source) {
			return we.Err
		}
	}
	return nil
}

// checkWatchErrorsClean checks that no watch error carries a raw byte a
// hostile name could forge or hide a log line with, or more than a few
// kilobytes.
func checkWatchErrorsClean(t *testing.T, srv *mccrserver.Server) {
	t.Helper()
	for _, we := range srv.WatchErrors() {
		msg := we.Err.Error()
		switch {
		case !utf8.ValidString(msg):
			t.Errorf("watch error is not valid UTF-8: %q", msg)
		case strings.ContainsAny(msg, "\n\x00\x1b\u202e\u200b"):
			t.Errorf("watch error carries a raw control or format character: %q", msg)
		case len(msg) > 4096:
			t.Errorf("watch error of %d bytes, starting %q: a hostile name must be cut", len(msg), msg[:200])
		}
	}
}

// scrapeMetrics reads the metrics endpoint at addr.
func scrapeMetrics(t *testing.T, addr string) []byte {
	t.Helper()
	var body []byte
	test.Eventually(t, 30*time.Second, "/metrics answers", func() bool {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s", resp.Status)
		}
		body, err = io.ReadAll(resp.Body)
		return err == nil
	})
	http.DefaultClient.CloseIdleConnections()
	return body
}
