package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// maxKubeconfigSize bounds how much of one file is read. Kubeconfigs with
// embedded certificates are a few kilobytes; the bound keeps a stray large
// file, or a device such as /dev/zero, from exhausting memory.
const maxKubeconfigSize = 16 << 20

// maxKubeconfigNodes bounds the YAML nodes a kubeconfig may hold, its
// aliases expanded (see internal/yamlshape): clientcmd.Load allocates
// about a kilobyte a node, so the bound keeps a file of nothing but nodes
// to some 150 MiB allocated while it decodes, where a file of 16 MiB could
// hold gigabytes. A kubeconfig with embedded certificates and tokens has
// some 60 nodes a context: the bound leaves room for about 4,000.
const maxKubeconfigNodes = 1 << 18

// maxKubeconfigText bounds the text of a kubeconfig's scalars, its aliases
// expanded (see internal/yamlshape): an alias repeats its anchor's text
// at no cost in nodes, so "a: &a <a megabyte>" and a few thousand "*a"
// would decode to gigabytes of JSON. Twice the largest file leaves a
// kubeconfig that shares a certificate among thousands of clusters by an
// anchor well within it.
const maxKubeconfigText = 2 * maxKubeconfigSize

// maxReferencedFileSize bounds a certificate, key or token file that a
// kubeconfig names. They are a few kilobytes at most.
const maxReferencedFileSize = 1 << 20

// maxTokenFileSize is kept for the size rule's older name.
const maxTokenFileSize = maxReferencedFileSize

// LoadOptions says what a kubeconfig may contain.
type LoadOptions struct {
	// AllowAuthPlugins accepts users with exec plugins and auth-provider
	// entries. Off by default: a kubeconfig dropped into a watched directory
	// must not be a way to run programs in the controller's process.
	AllowAuthPlugins bool

	// FileReferenceRoots are directories, besides the kubeconfig's own, that
	// its certificate-authority, client-certificate, client-key and
	// tokenFile paths may lead into (see AllowFileReferences).
	FileReferenceRoots []string

	// AnyFileReferences lets those paths lead anywhere, as kubectl does.
	AnyFileReferences bool
}

// LoadOption sets a LoadOptions field. The same options serve
// LoadConfigsFromConfigFile, LoadFile and the file watcher of package
// configwatcher (configwatcher.WithLoadOptions).
type LoadOption func(*LoadOptions)

// AllowAuthPlugins accepts exec and auth-provider users. Use it when the
// kubeconfigs come from a trusted place and their clusters need such
// credentials (cloud providers' exec plugins, for instance).
func AllowAuthPlugins() LoadOption {
	return func(o *LoadOptions) { o.AllowAuthPlugins = true }
}

// AllowFileReferences lets the certificate-authority, client-certificate,
// client-key and tokenFile paths of a kubeconfig lead, after symlinks, into
// the given directories as well as the kubeconfig's own; with no roots they
// may lead anywhere. Files in the roots (anywhere, with no roots) are left
// to client-go, which reads them when it connects and again later (a
// rotated token, a renewed certificate), so a root must be a place whose
// content the caller trusts: whoever writes the kubeconfig decides which of
// its files are sent to the server the kubeconfig names. Only a path that
// lies in a root as written is left to client-go; one that reaches a root
// through a link elsewhere (in the kubeconfig's own directory, in /tmp) is
// read by mccr once, as are files in the kubeconfig's own directory: the
// link's or the directory's writer may point it anywhere once it is
// checked.
//
// Without this option a kubeconfig loaded from a directory, or by a file
// watcher, may only name files in its own directory. mccr reads those once,
// through the same checks, and uses their content; the watcher reads them
// again whenever something in the directory changes.
func AllowFileReferences(roots ...string) LoadOption {
	return func(o *LoadOptions) {
		if len(roots) == 0 {
			o.AnyFileReferences = true
		}
		o.FileReferenceRoots = append(o.FileReferenceRoots, roots...)
	}
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
// Those file paths are untrusted in a directory: a kubeconfig's
// certificate-authority, client-certificate, client-key and tokenFile must
// lead, after symlinks, into the directory the kubeconfig is in (a mounted
// Secret's "..data" links do), and must be regular files of at most 1 MiB.
// Anything else is refused with ErrFileReferenceRefused or
// ErrInvalidKubeconfig before it is opened, unless AllowFileReferences
// names the place. A single file given as path is the user's own choice,
// as with kubectl: its paths may lead anywhere and are left to client-go.
//
// What cannot be used is reported, each problem a *FileError naming the file
// and context, joined into one error: malformed files, files without
// contexts (unless they say so: "contexts: null" or "contexts: []", as
// "kubectl config delete-context" of the last one leaves a file), contexts whose name ValidateName refuses (wrapping
// ErrInvalidName), contexts naming a missing cluster or user, exec and
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
	isDir := false
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		opts = append(slices.Clone(opts), AllowFileReferences())
	} else {
		isDir = true
	}
	loaded := make([]FileConfigs, 0, len(files))
	load := LoadFile
	if isDir {
		load = LoadDirectoryEntry
	}
	for _, f := range files {
		cfgs, err := load(f, opts...)
		loaded = append(loaded, FileConfigs{Path: f, Configs: cfgs, Err: err})
	}
	return MergeFileConfigs(loaded)
}

// CheckDirectoryEntry applies the file reference rule to a kubeconfig found
// in a directory: an entry that is a symlink must resolve inside that
// directory (a mounted Secret's entries lead through "..data", which is),
// unless opts include AllowFileReferences for its target. Otherwise it is
// an ErrFileReferenceRefused *FileError, and the target is not opened: a
// link to /etc/shadow, to another user's kubeconfig or to /dev/zero is not
// read as a kubeconfig.
func CheckDirectoryEntry(path string, opts ...LoadOption) error {
	o := newLoadOptions(opts)
	if o.AnyFileReferences || !isSymlink(path) {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return &FileError{Path: path, Err: err}
	}
	dir := filepath.Dir(abs)
	allowed, _, err := allowedRoots(dir, o.FileReferenceRoots)
	if err != nil {
		return &FileError{Path: path, Err: err}
	}
	target, err := filepath.EvalSymlinks(abs)
	if err != nil {
		// Not %w: a dangling link is not the file itself gone.
		return &FileError{Path: path, Err: fmt.Errorf("%w: cannot be resolved: %v", ErrInvalidKubeconfig, bareFSError(err))} //nolint:errorlint // see above
	}
	if !within(target, allowed) {
		return &FileError{Path: path, Err: fmt.Errorf("%w: the entry is a symlink that leads out of %s", ErrFileReferenceRefused, quoteIfOdd(dir))}
	}
	return nil
}

// LoadDirectoryEntry loads the kubeconfig found at path in a directory:
// CheckDirectoryEntry, then LoadFile, with no way around the check between
// the two. An entry replaced by a symlink leading out of the directory
// after it was checked (by whoever writes the directory) is found out once
// opened, from the file actually opened, and refused
// (ErrFileReferenceRefused) before a byte of it is read.
func LoadDirectoryEntry(path string, opts ...LoadOption) ([]*NamedConfig, error) {
	if err := CheckDirectoryEntry(path, opts...); err != nil {
		return nil, err
	}
	o := newLoadOptions(opts)
	if o.AnyFileReferences {
		return LoadFile(path, opts...)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	dir := filepath.Dir(abs)
	allowed, _, err := allowedRoots(dir, o.FileReferenceRoots)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	data, err := readRegular(path, maxKubeconfigSize, allowed)
	switch reason, unfit := errors.AsType[unfitFile](err); {
	case unfit && reason == changedWhileChecked:
		return nil, &FileError{Path: path, Err: fmt.Errorf("%w: the entry leads out of %s once opened (replaced since it was checked)", ErrFileReferenceRefused, quoteIfOdd(dir))}
	case unfit:
		return nil, &FileError{Path: path, Err: fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)}
	case err != nil:
		return nil, &FileError{Path: path, Err: err}
	}
	return parseKubeconfig(path, data, o)
}

// isSymlink reports whether path is a symbolic link. A path that cannot be
// examined (gone, unreadable directory) counts as no link: this check has
// nothing to say about it, and reading the file reports what is wrong.
func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// LoadFile loads one NamedConfig per context of the kubeconfig file at path,
// sorted by name, with Source{File: path, Context: name}. It applies the
// rules described at LoadConfigsFromConfigFile to one file. Contexts that
// cannot be used are reported (a *FileError each, joined) and the others
// returned; an error about the whole file (unreadable, malformed, no
// contexts) comes with no configs. A kubeconfig that says it has no
// contexts ("contexts: null" or "contexts: []", as "kubectl config
// delete-context" of the last one leaves it) is no error: it has no
// configs.
//
// LoadFile treats the file as found in a directory: its file references must
// stay in its own directory unless opts include AllowFileReferences.
func LoadFile(path string, opts ...LoadOption) ([]*NamedConfig, error) {
	o := newLoadOptions(opts)
	data, err := readLimited(path, maxKubeconfigSize)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return parseKubeconfig(path, data, o)
}

// readLimited reads a kubeconfig of at most limit bytes (see readRegular).
func readLimited(path string, limit int64) ([]byte, error) {
	data, err := readRegular(path, limit, nil)
	if _, unfit := errors.AsType[unfitFile](err); unfit {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)
	}
	return data, err
}

// unfitFile is why readRegular refused a file it could open.
type unfitFile string

func (e unfitFile) Error() string { return string(e) }

// changedWhileChecked is readRegular's refusal of a file opened outside
// its roots.
const changedWhileChecked unfitFile = "changed while it was checked"

// readRegular reads a regular file of at most limit bytes. It opens without
// blocking (a FIFO swapped in after a listing or a check opens at once),
// reads only a regular file, and no more than the size the file reports: a
// pseudo-file such as /proc/self/environ reports 0 bytes and yields many,
// and is refused. With roots, the file actually opened must lie within
// them (it may have been swapped since its path was resolved). Errors are
// the file system's own (without the path) or an unfitFile saying what the
// file is not; they never quote its content.
func readRegular(path string, limit int64, roots []string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, bareFSError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, bareFSError(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, unfitFile("not a regular file")
	}
	if fi.Size() > limit {
		return nil, unfitFile(fmt.Sprintf("larger than %d bytes", limit))
	}
	if roots != nil {
		if opened, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); err == nil && filepath.IsAbs(opened) && !within(opened, roots) {
			return nil, changedWhileChecked
		}
	}
	// One byte more than the size, to tell a file that yields more.
	data := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, bareFSError(err)
	}
	data = data[:n]
	if int64(n) > fi.Size() {
		return nil, unfitFile(fmt.Sprintf("yields more than its size of %d bytes (a pseudo-file, or written while read)", fi.Size()))
	}
	return data, nil
}

func parseKubeconfig(path string, data []byte, o LoadOptions) ([]*NamedConfig, error) {
	raw, err := DecodeKubeconfig(data)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	if len(raw.Contexts) == 0 {
		if saysNoContexts(data) {
			return nil, nil
		}
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
	built := map[reach]*reachResult{}
	for _, name := range names {
		nc, read, err := buildContext(raw, name, filepath.Dir(abs), o, built)
		if err != nil {
			errs = append(errs, &FileError{Path: path, Context: name, Err: err, read: read})
			continue
		}
		nc.Source = Source{File: path, Context: name}
		cfgs = append(cfgs, nc)
	}
	return cfgs, errors.Join(errs...)
}

// saysNoContexts reports whether a kubeconfig that decoded without contexts
// says so in so many words: its top-level "contexts" is written out as
// null ("null", "~") or as "[]", as "kubectl config delete-context" of the
// last context leaves it ("contexts: null"). A file that merely lacks
// contexts (empty, or cut off before or just after "contexts:", as a
// write in progress is) does not: it is ErrNoContexts. data has decoded,
// so its shape is bounded already.
func saysNoContexts(data []byte) bool {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return false
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return false
	}
	found := false
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "contexts" {
			continue
		}
		v := top.Content[i+1]
		switch {
		case v.Kind == yaml.SequenceNode && len(v.Content) == 0:
		case v.Kind == yaml.ScalarNode && v.Tag == "!!null" && v.Value != "":
		default:
			return false
		}
		found = true
	}
	return found
}

// reach is what a context's config is built from: its cluster and user.
// Contexts naming the same pair have the same config but for their name.
type reach struct{ cluster, user string }

// reachResult is what buildReach made of a reach.
type reachResult struct {
	cfg        *rest.Config
	refs, read []string
	err        error
}

// buildContext builds one context's config. When err is set, read is what
// checkFileReferences says the context's content was taken from (the
// config's FilesRead otherwise). built holds what was built for the contexts before it: a
// cluster and user are checked, read and built once however many contexts
// name them (a kubeconfig of thousands of contexts naming one cluster with
// megabytes of certificates would otherwise hold a copy of them each, and
// parse them again for each).
func buildContext(raw *clientcmdapi.Config, name, dir string, o LoadOptions, built map[reach]*reachResult) (nc *NamedConfig, read []string, err error) {
	// The context's name is the cluster's: the one gate for names applies
	// here already, so that the context is reported with its file.
	if err := ValidateName(name); err != nil {
		return nil, read, fmt.Errorf("%w: context name: %w", ErrInvalidKubeconfig, err)
	}
	kctx := raw.Contexts[name]
	if kctx == nil || kctx.Cluster == "" {
		return nil, read, fmt.Errorf("%w: context names no cluster", ErrInvalidKubeconfig)
	}
	key := reach{kctx.Cluster, kctx.AuthInfo}
	r, ok := built[key]
	if !ok {
		r = &reachResult{}
		r.cfg, r.refs, r.read, r.err = buildReach(raw, name, kctx, dir, o)
		built[key] = r
	}
	if r.err != nil {
		return nil, slices.Clone(r.read), r.err
	}
	nc = NewNamedConfig(name, ownConfig(r.cfg))
	nc.refs = slices.Clone(r.refs)
	nc.read = slices.Clone(r.read)
	return nc, nil, nil
}

// ownConfig copies a config built for several contexts for one of them:
// what client-go or a member may change (the exec and auth-provider
// settings, impersonation) is its own; the certificate and key data, which
// nothing changes, are shared.
func ownConfig(cfg *rest.Config) *rest.Config {
	c := new(rest.Config)
	*c = *cfg
	if cfg.ExecProvider != nil {
		c.ExecProvider = cfg.ExecProvider.DeepCopy()
	}
	if cfg.AuthProvider != nil {
		c.AuthProvider = cfg.AuthProvider.DeepCopy()
	}
	c.Impersonate.Groups = slices.Clone(cfg.Impersonate.Groups)
	c.Impersonate.Extra = maps.Clone(cfg.Impersonate.Extra)
	c.NextProtos = slices.Clone(cfg.NextProtos)
	return c
}

// buildReach builds the config of the cluster and user that context name
// (kctx) names (see buildContext); refs are the files they named, read those
// whose content the config holds.
func buildReach(raw *clientcmdapi.Config, name string, kctx *clientcmdapi.Context, dir string, o LoadOptions) (cfg *rest.Config, refs, read []string, err error) {
	cluster := raw.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, nil, read, fmt.Errorf("%w: cluster %s not found", ErrInvalidKubeconfig, QuoteName(kctx.Cluster))
	}
	if cluster.Server == "" {
		return nil, nil, read, fmt.Errorf("%w: cluster %s has no server", ErrInvalidKubeconfig, QuoteName(kctx.Cluster))
	}
	var user *clientcmdapi.AuthInfo
	if kctx.AuthInfo != "" {
		if user = raw.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, nil, read, fmt.Errorf("%w: user %s not found", ErrInvalidKubeconfig, QuoteName(kctx.AuthInfo))
		}
	}
	if user != nil && !o.AllowAuthPlugins {
		switch {
		case user.Exec != nil:
			return nil, nil, read, fmt.Errorf("%w: user %s has an exec plugin", ErrAuthPluginRefused, QuoteName(kctx.AuthInfo))
		case user.AuthProvider != nil:
			return nil, nil, read, fmt.Errorf("%w: user %s has an auth-provider", ErrAuthPluginRefused, QuoteName(kctx.AuthInfo))
		}
	}
	// Work on copies holding only this cluster and user, so that what
	// clientcmd reads is exactly what was checked, and checked files can be
	// replaced by their content.
	cluster = cluster.DeepCopy()
	if user != nil {
		user = user.DeepCopy()
	}
	refs, read, err = checkFileReferences(dir, cluster, user, o)
	if err != nil {
		return nil, nil, read, err
	}
	one := clientcmdapi.NewConfig()
	one.Clusters[kctx.Cluster] = cluster
	if user != nil {
		one.AuthInfos[kctx.AuthInfo] = user
	}
	one.Contexts[name] = kctx.DeepCopy()

	cfg, err = clientcmd.NewNonInteractiveClientConfig(*one, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, nil, read, fmt.Errorf("%w: %s", ErrInvalidKubeconfig, WithoutSecrets(err, cluster, user))
	}
	// A server that is no URL would fail later, in an error quoting it
	// whole, password included.
	if _, _, err := rest.DefaultServerUrlFor(&rest.Config{Host: cfg.Host}); err != nil {
		return nil, nil, read, fmt.Errorf("%w: server %s is neither a URL nor a host:port pair", ErrInvalidKubeconfig, quoteRef(RedactURL(cfg.Host)))
	}
	// Certificates that do not parse, and exec plugins client-go does not
	// run, would only fail later, when the cluster's Manager is built, far
	// from the file that holds them. Auth providers are not checked: they
	// are registered by the program that runs.
	if _, err := rest.TLSConfigFor(&rest.Config{Host: cfg.Host, TLSClientConfig: cfg.TLSClientConfig}); err != nil {
		return nil, nil, read, fmt.Errorf("%w: TLS settings: %s", ErrInvalidKubeconfig, WithoutSecrets(err, cluster, user))
	}
	if err := CheckExecPlugin(cfg.ExecProvider); err != nil {
		return nil, nil, read, fmt.Errorf("%w: user %s: %w", ErrInvalidKubeconfig, QuoteName(kctx.AuthInfo), err)
	}
	return cfg, refs, read, nil
}
