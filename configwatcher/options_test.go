package configwatcher

import (
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/config"
)

// TestSharedOptionsApply: WithLogger sets the logger of every watcher and
// AllowAuthPlugins the flag of each watcher that takes it, through the
// same loop as the watcher's own options; nil options are passed over.
func TestSharedOptionsApply(t *testing.T) {
	l := funcr.New(func(string, string) {}, funcr.Options{})
	log, plugins := WithLogger(l), AllowAuthPlugins()

	fo, err := newFileOptions([]FileOption{nil, log, plugins, FileOptionFunc(nil), WithDebounce(time.Minute),
		FileOptionFunc(func(o *FileOptions) { o.Debounce *= 2 }), WithLoadOptions(config.AllowAuthPlugins()), AllowFileReferences("/r")})
	if err != nil {
		t.Fatal(err)
	}
	if fo.Logger.GetSink() != l.GetSink() || !fo.AllowAuthPlugins || fo.Debounce != 2*time.Minute || len(fo.LoadOptions) != 2 {
		t.Errorf("FileOptions not applied in order: %+v", fo)
	}
	var lo config.LoadOptions
	for _, opt := range fo.LoadOptions {
		opt(&lo)
	}
	if !lo.AllowAuthPlugins || len(lo.FileReferenceRoots) != 1 || lo.FileReferenceRoots[0] != "/r" {
		t.Errorf("WithLoadOptions, AllowFileReferences: %+v", lo)
	}
	if fo, err := newFileOptions(nil); err != nil || fo.AllowAuthPlugins || fo.Debounce != DefaultDebounce || fo.Logger.GetSink() == l.GetSink() {
		t.Errorf("FileOptions defaults: %v, %+v", err, fo)
	}

	so, err := newSecretOptions([]SecretOption{nil, log, plugins})
	if err != nil || so.Logger.GetSink() != l.GetSink() || !so.AllowAuthPlugins {
		t.Errorf("SecretOptions: %v, %+v", err, so)
	}
	co, err := newClusterAPIOptions([]ClusterAPIOption{nil, log, plugins})
	if err != nil || co.Logger.GetSink() != l.GetSink() || !co.AllowAuthPlugins {
		t.Errorf("ClusterAPIOptions: %v, %+v", err, co)
	}
	po, err := newClusterProfileOptions([]ClusterProfileOption{nil, log, WithAccessProviders(AccessProvider{
		Name: "p", ExecConfig: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/p"},
	})})
	if err != nil || po.Logger.GetSink() != l.GetSink() {
		t.Errorf("ClusterProfileOptions: %v, %+v", err, po)
	}
	ko, err := newKubeFedOptions([]KubeFedOption{nil, log})
	if err != nil || ko.Logger.GetSink() != l.GetSink() {
		t.Errorf("KubeFedOptions: %v, %+v", err, ko)
	}

	// Without them, the defaults: a logger that discards, no plugins.
	so, _ = newSecretOptions(nil)
	co, _ = newClusterAPIOptions(nil)
	if so.AllowAuthPlugins || co.AllowAuthPlugins || so.Logger.GetSink() == l.GetSink() || co.Logger.GetSink() == l.GetSink() {
		t.Errorf("defaults: %+v, %+v", so, co)
	}
}
