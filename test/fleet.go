package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mccr-dev/mccr/config"
)

// ErrBinariesMissing is returned when kube-apiserver or etcd cannot be found.
var ErrBinariesMissing = errors.New("kube-apiserver/etcd binaries not found: run `make kubebins` in the mccr repository, or set KUBEBUILDER_ASSETS to a directory holding both")

// Options configures a Fleet. The zero value is ready to use.
type Options struct {
	// BinaryAssetsDirectory holds kube-apiserver and etcd. Defaults to
	// $KUBEBUILDER_ASSETS.
	BinaryAssetsDirectory string

	// CRDPaths are files or directories of CRD manifests installed into
	// every cluster once it is up (KubeFedCRDPath returns KubeFed's).
	CRDPaths []string

	// CRDs are installed into every cluster too.
	CRDs []*apiextensionsv1.CustomResourceDefinition

	// Dir is where kubeconfig files are written, one per cluster, named
	// after it. Defaults to a new temporary directory, removed by Stop.
	Dir string

	// StartTimeout bounds the start of one API server (and its etcd).
	// Defaults to 60s: several API servers starting at once on two cores
	// need far more than envtest's default.
	StartTimeout time.Duration

	// MaxParallel caps how many API servers start at the same time.
	// Defaults to 8.
	MaxParallel int
}

func (o *Options) defaults() {
	if o.BinaryAssetsDirectory == "" {
		o.BinaryAssetsDirectory = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.MaxParallel <= 0 {
		o.MaxParallel = 8
	}
}

// Fleet is a set of running API servers.
type Fleet struct {
	// Clusters in the order their names were given.
	Clusters []*Cluster
	// Dir holds one kubeconfig file per cluster, <name>.kubeconfig.
	Dir string

	ownDir   bool
	stopOnce sync.Once
	stopErr  error
}

// Cluster is one running API server of a Fleet.
type Cluster struct {
	// Name is the cluster's name, also the context name in its kubeconfig.
	Name string
	// Config reaches the API server as an administrator (system:masters).
	Config *rest.Config
	// Named is Config under Name, sourced from KubeconfigPath.
	Named *config.NamedConfig
	// KubeconfigPath is a kubeconfig file with one context, Name.
	KubeconfigPath string
	// Env is the underlying envtest environment.
	Env *envtest.Environment

	proc  apiServerProcess
	admin adminClient
}

// Start starts one API server per name, in parallel, and writes their
// kubeconfig files. On error, whatever was started is stopped again.
func Start(opts Options, names ...string) (*Fleet, error) {
	opts.defaults()
	if err := checkBinaries(opts.BinaryAssetsDirectory); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			return nil, fmt.Errorf("test: cluster names must be unique and non-empty, got %q", names)
		}
		seen[n] = true
	}
	f := &Fleet{Dir: opts.Dir}
	if f.Dir == "" {
		dir, err := os.MkdirTemp("", "mccr-fleet-")
		if err != nil {
			return nil, err
		}
		f.Dir, f.ownDir = dir, true
	} else if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return nil, err
	}

	f.Clusters = make([]*Cluster, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, opts.MaxParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f.Clusters[i], errs[i] = startCluster(name, f.Dir, opts)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = f.Stop()
		return nil, err
	}
	return f, nil
}

// NewFleet is Start for tests: it fails tb on error and stops the fleet when
// the test (or benchmark) ends.
func NewFleet(tb testing.TB, opts Options, names ...string) *Fleet {
	tb.Helper()
	f, err := Start(opts, names...)
	if err != nil {
		tb.Fatalf("starting fleet %v: %v", names, err)
	}
	tb.Cleanup(func() {
		if err := f.Stop(); err != nil {
			tb.Errorf("stopping fleet: %v", err)
		}
	})
	return f
}

// Cluster returns the cluster with the given name, or nil.
func (f *Fleet) Cluster(name string) *Cluster {
	for _, c := range f.Clusters {
		if c != nil && c.Name == name {
			return c
		}
	}
	return nil
}

// Configs returns every cluster's NamedConfig.
func (f *Fleet) Configs() []*config.NamedConfig {
	out := make([]*config.NamedConfig, 0, len(f.Clusters))
	for _, c := range f.Clusters {
		out = append(out, c.Named)
	}
	return out
}

// Stop closes the connections of the admin clients, stops every API server
// in parallel and removes files the fleet created. It is safe to call more
// than once.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() {
		f.CloseConnections()
		errs := make([]error, len(f.Clusters))
		var wg sync.WaitGroup
		for i, c := range f.Clusters {
			if c == nil {
				continue
			}
			wg.Go(func() { errs[i] = c.stop() })
		}
		wg.Wait()
		err := errors.Join(errs...)
		if f.ownDir {
			err = errors.Join(err, os.RemoveAll(f.Dir))
		}
		f.stopErr = err
	})
	return f.stopErr
}

// Client returns a new uncached controller-runtime client for the cluster,
// using client-go's default scheme unless opts says otherwise.
func (c *Cluster) Client(opts client.Options) (client.Client, error) {
	return client.New(c.Config, opts)
}

func startCluster(name, dir string, opts Options) (*Cluster, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinaryAssetsDirectory,
		CRDDirectoryPaths:        opts.CRDPaths,
		CRDs:                     opts.CRDs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	cfg, err := env.Start()
	if err != nil {
		// A failed start can leave a process behind; Stop takes it down.
		return nil, errors.Join(fmt.Errorf("test: starting API server for cluster %q: %w", name, err), env.Stop())
	}
	cfg = rest.CopyConfig(cfg)
	path := filepath.Join(dir, name+".kubeconfig")
	if err := WriteKubeconfig(path, name, cfg); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	named := config.NewNamedConfig(name, cfg)
	named.Source = config.Source{File: path, Context: name}
	c := &Cluster{Name: name, Config: cfg, Named: named, KubeconfigPath: path, Env: env}
	if err := c.proc.find(env); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return c, nil
}

func (c *Cluster) stop() error {
	// A restarted API server is ours, not envtest's, to stop.
	return errors.Join(c.proc.stopRestarted(), c.Env.Stop())
}

// WriteKubeconfig writes a kubeconfig file with a single context named name
// that reaches cfg's API server with cfg's credentials. Only inline
// credentials (certificate data, bearer token) are written.
func WriteKubeconfig(path, name string, cfg *rest.Config) error {
	return clientcmd.WriteToFile(KubeconfigFor(name, cfg), path)
}

// KubeconfigFor builds the in-memory kubeconfig WriteKubeconfig writes.
func KubeconfigFor(name string, cfg *rest.Config) clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return *kc
}

func checkBinaries(dir string) error {
	if dir == "" {
		return ErrBinariesMissing
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%w (looked in %s)", ErrBinariesMissing, dir)
		}
	}
	return nil
}

// waitReady polls the API server's /readyz until it answers or ctx ends.
func waitReady(ctx context.Context, cfg *rest.Config) error {
	rc, err := rest.UnversionedRESTClientFor(withCodec(cfg))
	if err != nil {
		return err
	}
	for {
		err = rc.Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("API server at %s not ready: %w", cfg.Host, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
