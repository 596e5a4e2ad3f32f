package configwatcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/mccr-dev/mccr/configwatcher"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	mccrserver "github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// Access providers of the hostile-environment test: the same shell
// wrapper under the two env policies that read a profile's variables.
const (
	cpxAppend  = "wrapped-append"
	cpxReplace = "wrapped-replace"
)

// cpxWrapper is an access provider shaped like a cloud CLI's: a bash
// script that runs a helper found on PATH, then the real plugin next to
// it. bash reads BASH_ENV (expanding it, command substitutions included)
// and imports functions from BASH_FUNC_name%% variables before the first
// line runs.
const cpxWrapper = `#!/bin/bash
set -eu
here=$(dirname "$0")
exec "$here/execplugin" "$@"
`

// TestClusterProfileExecEnvHostile: a Server fed by a ClusterProfile
// watcher whose access provider is a shell wrapper, under
// AppendIfNotExists and Replace. Profiles that set BASH_ENV, an exported
// bash function, PATH, ENV, LD_PRELOAD or SHELLOPTS/PS4 to something that
// would create a marker file never join: each is a watch error naming the
// profile and the variable, not its value, and no marker is ever created.
// A benign variable reaches the plugin; one the controller's process
// already has is not overridden; a joined cluster whose profile turns
// hostile keeps its last good config, and its Manager.
func TestClusterProfileExecEnvHostile(t *testing.T) {
	// Registered first, so it runs last: after the fleet has stopped.
	t.Cleanup(func() { leakcheck.VerifyNone(t) })
	ctx := t.Context()
	f := test.NewFleet(t, test.Options{}, "cpx")
	// One API server is both the host of the profiles and the cluster
	// they describe.
	c := f.Cluster("cpx")
	installClusterProfileCRD(t, c.Config)
	e := &clusterProfileEnv{host: c, member: c, dir: t.TempDir()}
	var err error
	if e.hostClient, err = client.New(c.Config, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.token, err = test.ServiceAccountToken(ctx, c.Config, "mccr-system", "cpx"); err != nil {
		t.Fatal(err)
	}
	e.plugin = filepath.Join(filepath.Dir(buildExecPlugin(t)), "wrapper")
	if err := os.WriteFile(e.plugin, []byte(cpxWrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	e.providersFile = filepath.Join(e.dir, "providers.json")
	writeCPXProviders(t, e)

	// What an attacker's values would do if they reached the wrapper:
	// each creates its own marker in marks.
	marks := t.TempDir()
	mark := func(name string) string { return filepath.Join(marks, name) }
	fakeBin := t.TempDir()
	if err := os.WriteFile(filepath.Join(fakeBin, "dirname"), []byte("#!/bin/sh\n: > "+mark("path")+"\necho /\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	hostile := []struct {
		profile, provider string
		env               map[string]string
		named             string // the variable the error names
	}{
		{"bash-env", cpxAppend, map[string]string{"BASH_ENV": "$(: > " + mark("bash-env") + ")"}, "BASH_ENV"},
		{"replace-bash-env", cpxReplace, map[string]string{"BASH_ENV": "$(: > " + mark("replace-bash-env") + ")"}, "BASH_ENV"},
		{"bash-func", cpxAppend, map[string]string{"BASH_FUNC_dirname%%": "() { : > " + mark("bash-func") + "; echo /; }"}, "BASH_FUNC_dirname%%"},
		{"path", cpxAppend, map[string]string{"PATH": fakeBin + ":/usr/bin:/bin"}, "PATH"},
		{"lower-path", cpxReplace, map[string]string{"path": fakeBin + ":/usr/bin:/bin"}, "path"},
		{"env", cpxAppend, map[string]string{"ENV": "$(: > " + mark("env") + ")"}, "ENV"},
		{"ld-preload", cpxReplace, map[string]string{"LD_PRELOAD": filepath.Join(fakeBin, "libmark.so")}, "LD_PRELOAD"},
		{"shell-options", cpxAppend, map[string]string{"SHELLOPTS": "xtrace", "PS4": "$(: > " + mark("shell-options") + ")"}, "SHELLOPTS"},
	}

	ns := e.namespace(t, e.hostClient)
	w, err := configwatcher.NewClusterProfileWatcher(c.Config,
		configwatcher.WithAccessProvidersFile(e.providersFile),
		configwatcher.WithClusterProfileNamespaces(ns),
		configwatcher.WithLogger(testr.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := newWatchingServer(t, c.Config, testr.New(t), w)
	// A controller whose cache lists ConfigMaps, so that a member that
	// joins runs the plugin.
	srv.AddReconcilerSetup(func(mgr ctrl.Manager) error {
		return ctrl.NewControllerManagedBy(mgr).Named("cpx-" + ns).For(&corev1.ConfigMap{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	})
	test.Run(t, srv)

	profile := func(name, provider string, env map[string]string) map[string]any {
		e.writeToken(t, name, e.token, 0)
		return cpStatus("True", nil, e.access(provider, name, map[string]any{"extensions": cpxExtensions(name, env)}))
	}
	ready := func(name string) mccrserver.ClusterStatus {
		t.Helper()
		var st mccrserver.ClusterStatus
		test.Eventually(t, kfPatience, name+" Ready", func() bool {
			var err error
			st, err = srv.Status(ns + "/" + name)
			return err == nil && st.Phase == mccrserver.PhaseReady
		})
		return st
	}
	pluginSaw := func(name string) []string {
		t.Helper()
		runs := e.pluginRuns(t, name)
		envs := make([]string, 0, len(runs))
		for _, run := range runs {
			envs = append(envs, run.Env)
		}
		return envs
	}

	// A benign variable reaches the plugin, under either policy.
	benign := createClusterProfile(t, e.hostClient, ns, "benign", nil, profile("benign", cpxAppend, map[string]string{"EXECPLUGIN_EXTRA": "from-profile"}))
	createClusterProfile(t, e.hostClient, ns, "benign-replace", nil, profile("benign-replace", cpxReplace, map[string]string{"EXECPLUGIN_EXTRA": "from-profile"}))
	st0 := ready("benign")
	ready("benign-replace")
	for _, name := range []string{"benign", "benign-replace"} {
		if got := pluginSaw(name); len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != "from-profile" }) {
			t.Errorf("%s: the plugin saw EXECPLUGIN_EXTRA %q, want from-profile", name, got)
		}
	}

	// The hostile profiles: refused, one watch error each.
	for _, h := range hostile {
		createClusterProfile(t, e.hostClient, ns, h.profile, nil, profile(h.profile, h.provider, h.env))
	}
	for _, h := range hostile {
		err := cpxWatchError(t, srv, "ClusterProfile "+ns+"/"+h.profile+":", `"`+h.named+`"`)
		if !errors.Is(err, configwatcher.ErrClusterProfileInvalid) {
			t.Errorf("%s: error %v does not wrap ErrClusterProfileInvalid", h.profile, err)
		}
		for _, v := range h.env {
			if strings.Contains(err.Error(), v) {
				t.Errorf("%s: the error quotes the variable's value: %v", h.profile, err)
			}
		}
	}

	// A variable the controller's process has is the controller's, under
	// AppendIfNotExists and Replace alike.
	t.Setenv("EXECPLUGIN_EXTRA", "inherited")
	for _, p := range []struct{ name, provider string }{{"inherited", cpxAppend}, {"inherited-replace", cpxReplace}} {
		createClusterProfile(t, e.hostClient, ns, p.name, nil, profile(p.name, p.provider, map[string]string{"EXECPLUGIN_EXTRA": "from-profile"}))
		ready(p.name)
		if got := pluginSaw(p.name); len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != "inherited" }) {
			t.Errorf("%s: the plugin saw EXECPLUGIN_EXTRA %q, want the controller's (inherited)", p.name, got)
		}
	}

	// A joined cluster whose profile turns hostile keeps its last good
	// config: no restart, and the plugin never sees the variable.
	setProfileStatus(t, e.hostClient, benign, func(s map[string]any) {
		s["accessProviders"] = []any{e.access(cpxAppend, "benign", map[string]any{"extensions": cpxExtensions("benign",
			map[string]string{"EXECPLUGIN_EXTRA": "from-profile", "BASH_ENV": "$(: > " + mark("turned") + ")"})})}
	})
	_ = cpxWatchError(t, srv, "ClusterProfile "+ns+"/benign:", `"BASH_ENV"`, "last good config")
	if st := ready("benign"); st.Restarts != st0.Restarts || st.Failures != st0.Failures {
		t.Errorf("benign restarted: restarts %d (was %d), failures %d (was %d)", st.Restarts, st0.Restarts, st.Failures, st0.Failures)
	}

	for _, h := range hostile {
		if _, err := srv.Status(ns + "/" + h.profile); !errors.Is(err, mccrserver.ErrClusterNotFound) {
			t.Errorf("%s joined the fleet: %v", h.profile, err)
		}
	}
	if got, _ := os.ReadDir(marks); len(got) > 0 {
		t.Errorf("a profile's value ran in the plugin's wrapper: markers %v", got)
	}
}

// writeCPXProviders writes e's providers file: e.plugin under
// AppendIfNotExists and Replace, as cpxAppend and cpxReplace.
func writeCPXProviders(t *testing.T, e *clusterProfileEnv) {
	t.Helper()
	providers := make([]any, 0, 2)
	for name, policy := range map[string]configwatcher.AccessPolicy{
		cpxAppend:  configwatcher.AccessPolicyAppendIfNotExists,
		cpxReplace: configwatcher.AccessPolicyReplace,
	} {
		providers = append(providers, map[string]any{
			"name": name,
			"execConfig": map[string]any{
				"apiVersion":         "client.authentication.k8s.io/v1",
				"command":            e.plugin,
				"args":               []string{"--dir", e.dir, "--provider=" + name},
				"provideClusterInfo": true,
			},
			"profileSourcedEnvVarsPolicy": policy,
		})
	}
	data, err := json.Marshal(map[string]any{"providers": providers})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.providersFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cpxExtensions are a profile's cluster extensions: the exec extension
// naming cluster for the plugin, and env as the env extension.
func cpxExtensions(cluster string, env map[string]string) []any {
	return []any{
		map[string]any{"name": configwatcher.ClusterExecExtension, "extension": map[string]any{"clusterName": cluster}},
		map[string]any{"name": configwatcher.ClusterProfileEnvExtension, "extension": env},
	}
}

// cpxWatchError waits for a watch error of srv mentioning every part, and
// returns it.
func cpxWatchError(t *testing.T, srv *mccrserver.Server, parts ...string) error {
	t.Helper()
	var found error
	test.Eventually(t, kfPatience, fmt.Sprintf("a watch error mentioning %q", parts), func() bool {
		for _, we := range srv.WatchErrors() {
			if containsAll(we.Err.Error(), parts) {
				found = we.Err
				return true
			}
		}
		return false
	})
	return found
}
