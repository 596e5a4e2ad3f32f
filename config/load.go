package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// maxKubeconfigSize bounds how much of one file is read. Kubeconfigs with
// embedded certificates are a few kilobytes; the bound keeps a stray large
// file, or a device such as /dev/zero, from exhausting memory.
const maxKubeconfigSize = 16 << 20

// maxTokenFileSize bounds a token file that client-go reads while building a
// config. Bearer tokens are a few kilobytes at most.
const maxTokenFileSize = 1 << 20

// LoadOptions says what a kubeconfig may contain.
type LoadOptions struct {
	// AllowAuthPlugins accepts users with exec plugins and auth-provider
	// entries. Off by default: a kubeconfig dropped into a watched directory
	// must not be a way to run programs in the controller's process.
	AllowAuthPlugins bool
}

// LoadOption sets a LoadOptions field.
type LoadOption func(*LoadOptions)

// AllowAuthPlugins accepts exec and auth-provider users. Use it when the
// kubeconfigs come from a trusted place and their clusters need such
// credentials (cloud providers' exec plugins, for instance).
func AllowAuthPlugins() LoadOption {
	return func(o *LoadOptions) { o.AllowAuthPlugins = true }
}

func newLoadOptions(opts []LoadOption) LoadOptions {
	var o LoadOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// LoadConfigsFromConfigFile loads one NamedConfig per context from a
// kubeconfig file, or from every kubeconfig in a directory, sorted by name.
// A leading "~/" in path stands for the user's home directory.
//
// A directory is read as KubeconfigFiles describes: hidden entries and
// sub-directories are skipped and symlinks are followed, so a mounted
// Secret or ConfigMap works as it is. Relative certificate, key and token
// file paths are resolved against the directory of the kubeconfig that
// names them (as reached through path, not through symlinks), never against
// the working directory. A file that a good kubeconfig of the directory
// names as its certificate, key or token is data, not a kubeconfig, and is
// not reported as broken.
//
// What cannot be used is reported, each problem a *FileError naming the file
// and context, joined into one error: malformed files, files without
// contexts, contexts naming a missing cluster or user, exec and
// auth-provider users (unless AllowAuthPlugins), and a context defined in
// two files (ErrDuplicateContext; the file whose path sorts first keeps it).
// Whatever is usable is returned along with that error, so one bad file does
// not take the rest of a fleet down. An empty directory is an empty fleet.
func LoadConfigsFromConfigFile(path string, opts ...LoadOption) ([]*NamedConfig, error) {
	path, err := expandHome(path)
	if err != nil {
		return nil, err
	}
	files, err := KubeconfigFiles(path)
	if err != nil {
		return nil, err
	}
	loaded := make([]FileConfigs, 0, len(files))
	for _, f := range files {
		cfgs, err := LoadFile(f, opts...)
		loaded = append(loaded, FileConfigs{Path: f, Configs: cfgs, Err: err})
	}
	return MergeFileConfigs(loaded)
}

// LoadFile loads one NamedConfig per context of the kubeconfig file at path,
// sorted by name, with Source{File: path, Context: name}. It applies the
// rules described at LoadConfigsFromConfigFile to one file. Contexts that
// cannot be used are reported (a *FileError each, joined) and the others
// returned; an error about the whole file (unreadable, malformed, no
// contexts) comes with no configs.
func LoadFile(path string, opts ...LoadOption) ([]*NamedConfig, error) {
	o := newLoadOptions(opts)
	data, err := readLimited(path, maxKubeconfigSize)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return parseKubeconfig(path, data, o)
}

// readLimited reads at most limit bytes of path and fails beyond that.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, bareFSError(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, bareFSError(err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidKubeconfig, limit)
	}
	return data, nil
}

func parseKubeconfig(path string, data []byte, o LoadOptions) ([]*NamedConfig, error) {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, &FileError{Path: path, Err: fmt.Errorf("%w: %s", ErrInvalidKubeconfig, decodeMessage(err, data))}
	}
	if len(raw.Contexts) == 0 {
		return nil, &FileError{Path: path, Err: ErrNoContexts}
	}

	// Relative paths in a kubeconfig are relative to the file. Resolve them
	// against the directory as given (not the symlink's target), so that a
	// Secret's "ca.crt" next to its "config" is found through the same
	// "..data" link, and follows it when the Secret is updated.
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	for _, c := range raw.Clusters {
		if c != nil {
			c.LocationOfOrigin = abs
		}
	}
	for _, u := range raw.AuthInfos {
		if u != nil {
			u.LocationOfOrigin = abs
		}
	}
	if err := clientcmd.ResolveLocalPaths(raw); err != nil {
		return nil, &FileError{Path: path, Err: err}
	}

	names := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		names = append(names, name)
	}
	slices.Sort(names)

	var cfgs []*NamedConfig
	var errs []error
	for _, name := range names {
		nc, err := buildContext(raw, name, o)
		if err != nil {
			errs = append(errs, &FileError{Path: path, Context: name, Err: err})
			continue
		}
		nc.Source = Source{File: path, Context: name}
		cfgs = append(cfgs, nc)
	}
	return cfgs, errors.Join(errs...)
}

func buildContext(raw *clientcmdapi.Config, name string, o LoadOptions) (*NamedConfig, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: a context has an empty name", ErrInvalidKubeconfig)
	}
	kctx := raw.Contexts[name]
	if kctx == nil || kctx.Cluster == "" {
		return nil, fmt.Errorf("%w: context names no cluster", ErrInvalidKubeconfig)
	}
	cluster := raw.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, fmt.Errorf("%w: cluster %q not found", ErrInvalidKubeconfig, kctx.Cluster)
	}
	if cluster.Server == "" {
		return nil, fmt.Errorf("%w: cluster %q has no server", ErrInvalidKubeconfig, kctx.Cluster)
	}
	var user *clientcmdapi.AuthInfo
	if kctx.AuthInfo != "" {
		if user = raw.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, fmt.Errorf("%w: user %q not found", ErrInvalidKubeconfig, kctx.AuthInfo)
		}
	}
	if user != nil && !o.AllowAuthPlugins {
		switch {
		case user.Exec != nil:
			return nil, fmt.Errorf("%w: user %q has an exec plugin", ErrAuthPluginRefused, kctx.AuthInfo)
		case user.AuthProvider != nil:
			return nil, fmt.Errorf("%w: user %q has an auth-provider", ErrAuthPluginRefused, kctx.AuthInfo)
		}
	}
	if err := checkReferencedFiles(cluster, user); err != nil {
		return nil, err
	}

	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidKubeconfig, withoutSecrets(err, user))
	}
	// Certificates that do not parse would only fail later, when the
	// cluster's Manager is built, far from the file that holds them. Only
	// TLS is checked: auth plugins are registered by the program that runs.
	if _, err := rest.TLSConfigFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig}); err != nil {
		return nil, fmt.Errorf("%w: TLS settings: %s", ErrInvalidKubeconfig, withoutSecrets(err, user))
	}
	return NewNamedConfig(name, cfg), nil
}
