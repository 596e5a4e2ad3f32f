package cmd

import (
	"flag"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestFlagsOptions(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	f.RegisterLeaderElection(fs, "runs the members")

	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	o := f.Options(scheme, "test.sample.mccr.dev")
	if o.Scheme != scheme || o.Metrics.BindAddress != "0" || o.HealthProbeBindAddress != ":8081" ||
		o.LeaderElection || o.LeaderElectionNamespace != "" || o.LeaderElectionID != "test.sample.mccr.dev" {
		t.Errorf("defaults: got %+v", o)
	}
	if want := "Enable leader election on the host cluster, so that only one replica runs the members at a time."; fs.Lookup("leader-elect").Usage != want {
		t.Errorf("--leader-elect usage %q, want %q", fs.Lookup("leader-elect").Usage, want)
	}

	if err := fs.Parse([]string{"--metrics-bind-address", ":8080", "--health-probe-bind-address", "0",
		"--leader-elect", "--leader-election-namespace", "kube-system", "--log-json", "--verbosity", "2"}); err != nil {
		t.Fatal(err)
	}
	o = f.Options(scheme, "test.sample.mccr.dev")
	if o.Metrics.BindAddress != ":8080" || o.HealthProbeBindAddress != "0" ||
		!o.LeaderElection || o.LeaderElectionNamespace != "kube-system" || !f.JSONLogs || f.Verbosity != 2 {
		t.Errorf("set: got %+v, %+v", o, f)
	}
	if !f.Logger().V(2).Enabled() || f.Logger().V(3).Enabled() {
		t.Error("--verbosity 2 should log V(2), not V(3)")
	}
}

func TestNewScheme(t *testing.T) {
	added := false
	s := NewScheme(func(*runtime.Scheme) error { added = true; return nil })
	if !added || !s.IsVersionRegistered(corev1.SchemeGroupVersion) {
		t.Errorf("added %v, core/v1 registered %v", added, s.IsVersionRegistered(corev1.SchemeGroupVersion))
	}
}
