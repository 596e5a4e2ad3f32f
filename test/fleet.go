package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// ErrFleetStopped is returned by Add once the fleet is stopped.
var ErrFleetStopped = errors.New("test: fleet is stopped")

// Fleet is a set of running API servers. Clusters can be added to a
// running fleet and removed from it.
type Fleet struct {
	// Clusters in the order they were started (for each Start or Add, in
	// the order the names were given). Add and Remove replace the slice
	// rather than change it, so a slice read before stays as it was; read
	// the field again (or use Cluster) after them, not concurrently.
	Clusters []*Cluster
	// Dir holds one kubeconfig file per cluster, <name>.kubeconfig.
	Dir string

	opts   Options
	ownDir bool

	mu        sync.Mutex
	starting  map[string]bool // names being started by Add or AddEndpoints
	stopped   bool
	endpoints []*Endpoint // replaced, not changed, like Clusters
	fw        *forwarder  // serves the endpoints; started by the first AddEndpoints

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
// kubeconfig files. On error, whatever was started is stopped again. With
// no names, the fleet starts empty; Add starts clusters later.
func Start(opts Options, names ...string) (*Fleet, error) {
	opts.defaults()
	if err := checkBinaries(opts.BinaryAssetsDirectory); err != nil {
		return nil, err
	}
	f := &Fleet{Dir: opts.Dir, opts: opts, starting: map[string]bool{}}
	if f.Dir == "" {
		dir, err := os.MkdirTemp("", "mccr-fleet-")
		if err != nil {
			return nil, err
		}
		f.Dir, f.ownDir = dir, true
	} else if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return nil, err
	}
	if _, err := f.Add(names...); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

// NewFleet is Start for tests: it fails tb on error and stops the fleet when
// the test (or benchmark) ends.
//
// Cleanups run last-registered first: create the fleet before whatever
// uses it (a Server started with Run, say), so that it is stopped after
// them. Clusters added later with Add are stopped with the fleet, so they
// too outlive what the test started after the fleet.
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

// Add starts one more API server per name, in parallel, on a fleet that
// may be running already, and returns the new clusters once all are up.
// Names must be new to the fleet. On error, the clusters this call started
// are stopped again and none is added. Clusters added here are stopped by
// Stop (or NewFleet's cleanup) with the others, or earlier by Remove.
func (f *Fleet) Add(names ...string) ([]*Cluster, error) {
	if err := f.reserve(names); err != nil {
		return nil, err
	}
	added := make([]*Cluster, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, f.opts.MaxParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			added[i], errs[i] = startCluster(name, f.Dir, f.opts)
		})
	}
	wg.Wait()

	err := f.unreserve(names, errors.Join(errs...), func() {
		// A new slice: one read before Add stays as it was.
		f.Clusters = append(slices.Clip(f.Clusters), added...)
	})
	if err != nil {
		return nil, errors.Join(err, stopClusters(added))
	}
	return added, nil
}

// reserve checks that names are new and not empty, and marks them as being
// started.
func (f *Fleet) reserve(names []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return ErrFleetStopped
	}
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] || f.starting[n] || f.cluster(n) != nil || f.endpoint(n) != nil {
			return fmt.Errorf("test: cluster and endpoint names must be unique and non-empty, got %q (fleet has clusters %q and %d endpoints)", names, f.names(), len(f.endpoints))
		}
		seen[n] = true
	}
	for _, n := range names {
		f.starting[n] = true
	}
	return nil
}

// unreserve ends what reserve began: names are no longer being started.
// Unless err is set or the fleet stopped meanwhile (ErrFleetStopped), it
// runs commit under the fleet's lock. It returns the error for which the
// caller must undo what it started.
func (f *Fleet) unreserve(names []string, err error, commit func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range names {
		delete(f.starting, n)
	}
	if err == nil && f.stopped {
		err = ErrFleetStopped
	}
	if err == nil {
		commit()
	}
	return err
}

// Remove stops the named cluster (its admin client's connections first,
// then its API server and etcd) and removes it and its kubeconfig file from
// the fleet. Stop what still uses the cluster first, or expect it to see
// the cluster go away, as when a real cluster is lost.
func (f *Fleet) Remove(name string) error {
	f.mu.Lock()
	c := f.cluster(name)
	if c == nil || f.stopped {
		f.mu.Unlock()
		return fmt.Errorf("test: fleet has no cluster %q", name)
	}
	f.Clusters = slices.DeleteFunc(slices.Clone(f.Clusters), func(x *Cluster) bool { return x == c })
	f.mu.Unlock()
	c.admin.close()
	return errors.Join(c.stop(), os.Remove(c.KubeconfigPath))
}

// Cluster returns the cluster with the given name, or nil.
func (f *Fleet) Cluster(name string) *Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cluster(name)
}

// snapshot returns the clusters as of now.
func (f *Fleet) snapshot() []*Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Clusters
}

func (f *Fleet) cluster(name string) *Cluster {
	for _, c := range f.Clusters {
		if c != nil && c.Name == name {
			return c
		}
	}
	return nil
}

func (f *Fleet) names() []string {
	out := make([]string, 0, len(f.Clusters))
	for _, c := range f.Clusters {
		out = append(out, c.Name)
	}
	return out
}

// Configs returns every cluster's NamedConfig.
func (f *Fleet) Configs() []*config.NamedConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*config.NamedConfig, 0, len(f.Clusters))
	for _, c := range f.Clusters {
		out = append(out, c.Named)
	}
	return out
}

// Stop closes the connections of the admin clients, stops the endpoints'
// forwarder, stops every API server in parallel and removes files the
// fleet created. It is safe to call more than once. A running Add fails
// with ErrFleetStopped and stops what it started.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() {
		f.CloseConnections()
		f.mu.Lock()
		f.stopped = true
		clusters := f.Clusters
		f.mu.Unlock()
		err := errors.Join(f.stopForwarder(), stopClusters(clusters))
		if f.ownDir {
			err = errors.Join(err, os.RemoveAll(f.Dir))
		}
		f.stopErr = err
	})
	return f.stopErr
}

func stopClusters(clusters []*Cluster) error {
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		if c == nil {
			continue
		}
		wg.Go(func() { errs[i] = c.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Client returns a new uncached controller-runtime client for the cluster,
// using client-go's default scheme unless opts says otherwise.
func (c *Cluster) Client(opts client.Options) (client.Client, error) {
	return client.New(c.Config, opts)
}

func startCluster(name, dir string, opts Options) (*Cluster, error) {
	// The processes start from a directory of their own holding the
	// shim (see shim_linux.go), which also records their pids.
	binDir, err := prepareShim(filepath.Join(dir, ".bin", name), opts.BinaryAssetsDirectory)
	if err != nil {
		return nil, fmt.Errorf("test: cluster %q: %w", name, err)
	}
	assets := opts.BinaryAssetsDirectory
	if binDir != "" {
		assets = binDir
	}
	env := &envtest.Environment{
		// Paths, not just the directory: envtest prefers
		// KUBEBUILDER_ASSETS over BinaryAssetsDirectory.
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: filepath.Join(assets, "kube-apiserver")},
			Etcd:      &envtest.Etcd{Path: filepath.Join(assets, "etcd")},
		},
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        opts.CRDPaths,
		CRDs:                     opts.CRDs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	c := &Cluster{Name: name, Env: env}
	c.proc.shimDir = binDir
	cfg, err := env.Start()
	if err != nil {
		// A failed start can leave a process behind; stop takes it down.
		return nil, errors.Join(fmt.Errorf("test: starting API server for cluster %q: %w", name, err), c.stop())
	}
	cfg = rest.CopyConfig(cfg)
	path := filepath.Join(dir, name+".kubeconfig")
	if err := WriteKubeconfig(path, name, cfg); err != nil {
		return nil, errors.Join(err, c.stop())
	}
	named := config.NewNamedConfig(name, cfg)
	named.Source = config.Source{File: path, Context: name}
	c.Config, c.Named, c.KubeconfigPath = cfg, named, path
	return c, nil
}

func (c *Cluster) stop() error {
	errs := []error{c.proc.stopFast(), ignoreGone(c.Env.Stop())}
	if c.proc.shimDir != "" {
		errs = append(errs, os.RemoveAll(c.proc.shimDir))
	}
	return errors.Join(errs...)
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
