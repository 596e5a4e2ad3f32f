package test

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// Endpoint is a cluster name with a loopback address of its own in front of
// one of the fleet's API servers, so that many names look like as many
// different API servers to whatever reaches them. Start N endpoints in
// front of a few real API servers to test or measure a fleet of N clusters
// without paying for N API servers (2–3 s and some 300 MiB each).
//
// Clients of one API server under different names still share whatever is
// keyed on its address (client-go's and mccr's connections, REST mappers);
// endpoints share nothing of the kind. Each endpoint is a port on
// 127.0.0.1 of a helper process, which forwards every connection byte for
// byte to the API server (TLS passes through: the client checks the API
// server's own certificate and presents its own credentials). The helper
// runs apart from the process under test, so its ports, connections and
// goroutines are not counted with that process's.
type Endpoint struct {
	// Name is the endpoint's cluster name, also the context name in its
	// kubeconfig.
	Name string
	// Address is the endpoint's host:port on 127.0.0.1.
	Address string
	// Backend is the fleet's cluster whose API server answers.
	Backend *Cluster
	// Config reaches Backend through Address, as an administrator. Its CA
	// bundle is Backend's with a comment naming the endpoint, so that no
	// two endpoints have the same TLS settings, as no two real clusters
	// do: nothing keyed on them (client-go's transport cache) is shared
	// either.
	Config *rest.Config
	// Named is Config under Name, sourced from KubeconfigPath.
	Named *config.NamedConfig
	// KubeconfigPath is a kubeconfig file with one context, Name, in the
	// fleet's EndpointDir.
	KubeconfigPath string

	fw *forwarder
}

// Connections returns how many connections the endpoint has accepted since
// it was added, and how many of them are open.
func (e *Endpoint) Connections() (accepted, open int, err error) {
	return e.fw.stats(e.Address)
}

// EndpointDir is the directory that holds the endpoints' kubeconfig files,
// <name>.kubeconfig: a FileWatcher pointed at it sees every endpoint as a
// cluster. It is apart from Dir, which holds the API servers' own.
func (f *Fleet) EndpointDir() string { return filepath.Join(f.Dir, "endpoints") }

// AddEndpoints gives each name an endpoint of its own: the i-th name
// forwards to the API server of backends[i%len(backends)], or of the
// fleet's clusters in turn when backends is empty. Names must be new to
// the fleet (neither a cluster's nor an endpoint's). On error, the
// endpoints this call added are removed again.
//
// The first call starts the helper process that serves every endpoint of
// the fleet; Stop (or NewFleet's cleanup) stops it, before the API
// servers. An endpoint whose backend is removed or stopped accepts
// connections and closes them.
func (f *Fleet) AddEndpoints(backends []*Cluster, names ...string) ([]*Endpoint, error) {
	if len(backends) == 0 {
		backends = f.snapshot()
	}
	if len(backends) == 0 {
		return nil, errors.New("test: endpoints need an API server behind them; the fleet has none")
	}
	fw, err := f.reserveEndpoints(names)
	if err != nil {
		return nil, err
	}
	added := make([]*Endpoint, 0, len(names))
	err = os.MkdirAll(f.EndpointDir(), 0o700)
	for i, name := range names {
		if err != nil {
			break
		}
		var e *Endpoint
		e, err = newEndpoint(fw, name, backends[i%len(backends)], f.EndpointDir())
		if e != nil {
			added = append(added, e)
		}
	}

	err = f.unreserve(names, err, func() { f.endpoints = append(slices.Clip(f.endpoints), added...) })
	if err != nil {
		for _, e := range added {
			err = errors.Join(err, e.remove())
		}
		return nil, err
	}
	return added, nil
}

// NewEndpoints is AddEndpoints for tests: it fails tb on error and removes
// the endpoints when the test (or benchmark) ends.
func NewEndpoints(tb testing.TB, f *Fleet, backends []*Cluster, names ...string) []*Endpoint {
	tb.Helper()
	eps, err := f.AddEndpoints(backends, names...)
	if err != nil {
		tb.Fatalf("adding endpoints %q: %v", names, err)
	}
	tb.Cleanup(func() {
		for _, e := range eps {
			if err := f.RemoveEndpoint(e.Name); err != nil {
				tb.Errorf("removing endpoint: %v", err)
			}
		}
	})
	return eps
}

// reserveEndpoints marks names as being added, as reserve does for
// clusters, and returns the fleet's forwarder, started on first use.
func (f *Fleet) reserveEndpoints(names []string) (*forwarder, error) {
	if err := f.reserve(names); err != nil {
		return nil, err
	}
	// Started under the lock, so that Stop, which sets stopped under it
	// first, either sees the forwarder or keeps it from starting.
	f.mu.Lock()
	var err error
	if f.stopped {
		err = ErrFleetStopped
	} else if f.fw == nil {
		f.fw, err = startForwarder()
	}
	fw := f.fw
	f.mu.Unlock()
	if err != nil {
		return nil, f.unreserve(names, err, nil)
	}
	return fw, nil
}

func newEndpoint(fw *forwarder, name string, backend *Cluster, dir string) (*Endpoint, error) {
	u, err := url.Parse(backend.Config.Host)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("test: endpoint %q: backend %s has no host:port in %q", name, backend.Name, backend.Config.Host)
	}
	addr, err := fw.listen(u.Host)
	if err != nil {
		return nil, fmt.Errorf("test: endpoint %q: %w", name, err)
	}
	cfg := rest.CopyConfig(backend.Config)
	cfg.Host = "https://" + addr
	comment := fmt.Sprintf("# mccr test endpoint %s at %s, in front of cluster %s\n", name, addr, backend.Name)
	cfg.CAData = append([]byte(comment), backend.Config.CAData...)
	e := &Endpoint{Name: name, Address: addr, Backend: backend, Config: cfg, fw: fw,
		KubeconfigPath: filepath.Join(dir, name+".kubeconfig")}
	if err := WriteKubeconfig(e.KubeconfigPath, name, cfg); err != nil {
		return nil, errors.Join(err, fw.close(addr))
	}
	e.Named = config.NewNamedConfig(name, cfg)
	e.Named.Source = config.Source{File: e.KubeconfigPath, Context: name}
	return e, nil
}

// remove closes the endpoint's port and its connections and removes its
// kubeconfig file.
func (e *Endpoint) remove() error {
	err := e.fw.close(e.Address)
	if errors.Is(err, errForwarderStopped) {
		err = nil
	}
	return errors.Join(err, os.Remove(e.KubeconfigPath))
}

// RemoveEndpoint closes the named endpoint's port and every connection
// through it, as when a cluster is lost, and removes it and its kubeconfig
// file from the fleet.
func (f *Fleet) RemoveEndpoint(name string) error {
	f.mu.Lock()
	i := slices.IndexFunc(f.endpoints, func(e *Endpoint) bool { return e.Name == name })
	if i < 0 || f.stopped {
		f.mu.Unlock()
		return fmt.Errorf("test: fleet has no endpoint %q", name)
	}
	e := f.endpoints[i]
	f.endpoints = slices.Delete(slices.Clone(f.endpoints), i, i+1)
	f.mu.Unlock()
	return e.remove()
}

// Endpoint returns the endpoint with the given name, or nil.
func (f *Fleet) Endpoint(name string) *Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endpoint(name)
}

func (f *Fleet) endpoint(name string) *Endpoint {
	if i := slices.IndexFunc(f.endpoints, func(e *Endpoint) bool { return e.Name == name }); i >= 0 {
		return f.endpoints[i]
	}
	return nil
}

// Endpoints returns the fleet's endpoints, in the order they were added.
func (f *Fleet) Endpoints() []*Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endpoints
}

// stopForwarder stops the helper process, which closes every endpoint.
func (f *Fleet) stopForwarder() error {
	f.mu.Lock()
	fw := f.fw
	f.mu.Unlock()
	if fw == nil {
		return nil
	}
	return fw.stop()
}
