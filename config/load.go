package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

var (
	// ErrInvalidKubeconfig is wrapped by every error about a kubeconfig, or a
	// context in one, that cannot be turned into a working *rest.Config:
	// malformed YAML, a context naming a cluster or user that is not there, a
	// cluster without a server, an unreadable certificate file, ….
	ErrInvalidKubeconfig = errors.New("invalid kubeconfig")

	// ErrNoContexts means a kubeconfig defines no context, so it names no
	// cluster. An empty file is such a kubeconfig; the file watcher treats it
	// like any broken file (it keeps the file's last good clusters), because
	// an editor that truncates before writing produces one for a moment.
	ErrNoContexts = errors.New("kubeconfig has no contexts")

	// ErrDuplicateContext means two kubeconfig files of one directory define
	// the same context name. Cluster names must be unique in a fleet, so only
	// one of them is used: the one in the file whose path sorts first.
	ErrDuplicateContext = errors.New("context is defined in more than one kubeconfig")

	// ErrAuthPluginRefused means a context's user has an exec plugin or an
	// auth-provider entry and the caller did not pass AllowAuthPlugins. Both
	// make client-go run code chosen by whoever wrote the file.
	ErrAuthPluginRefused = errors.New("auth plugin refused (exec and auth-provider users need AllowAuthPlugins)")
)

// maxKubeconfigSize bounds how much of one file is read. Kubeconfigs with
// embedded certificates are a few kilobytes; the bound keeps a stray large
// file, or a device such as /dev/zero, from exhausting memory.
const maxKubeconfigSize = 16 << 20

// maxTokenFileSize bounds a token file that client-go reads while building a
// config. Bearer tokens are a few kilobytes at most.
const maxTokenFileSize = 1 << 20

// FileError is a problem with one kubeconfig file, or with one context in it
// when Context is set. Err wraps one of the sentinel errors of this package
// (or an fs error when the file could not be read).
type FileError struct {
	// Path is the file, as it was given or found in its directory.
	Path string
	// Context is the context the problem is about, or "" for the whole file.
	Context string
	// OtherPath is, for ErrDuplicateContext, the file that keeps the context.
	OtherPath string
	// Err is what went wrong.
	Err error
}

// Error names the file and context. It never quotes the file's content:
// credentials live there.
func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("kubeconfig ")
	b.WriteString(quoteIfOdd(e.Path))
	if e.Context != "" {
		b.WriteString(", context ")
		b.WriteString(strconv.Quote(e.Context))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("unknown error")
	}
	if e.OtherPath != "" {
		b.WriteString(" (also defined in ")
		b.WriteString(quoteIfOdd(e.OtherPath))
		b.WriteString(", which keeps it)")
	}
	return b.String()
}

// Unwrap lets errors.Is and errors.As see the sentinel.
func (e *FileError) Unwrap() error { return e.Err }

// quoteIfOdd leaves ordinary paths readable and quotes the ones whose names
// could forge log lines (newlines, control characters).
func quoteIfOdd(s string) string {
	if strconv.CanBackquote(s) {
		return s
	}
	return strconv.Quote(s)
}

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

func expandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") && !strings.HasPrefix(path, "~"+string(filepath.Separator)) {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expanding %s: %w", path, err)
	}
	return filepath.Join(home, path[1:]), nil
}

// KubeconfigFiles lists the kubeconfig files found at path: path itself when
// it is a regular file (or a symlink to one), or the entries of a directory
// that count as kubeconfigs, sorted by name. Anything else (a FIFO, a
// device) is an error: reading it could block or never end. In a directory
// (not searched recursively):
//
//   - hidden entries, whose names start with ".", are skipped. Kubernetes
//     keeps a mounted volume's real files under "..data" and timestamped
//     "..2006_01_02_15_04_05.000" directories; editors keep swap and backup
//     files there too;
//   - sub-directories are skipped;
//   - symlinks are followed: one to a regular file counts (a mounted
//     Secret's files are symlinks through "..data"), one to anything else
//     or to nothing is skipped, as is anything that is not a regular file
//     (a FIFO would block the reader).
//
// A missing path is an error wrapping fs.ErrNotExist.
func KubeconfigFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: bareFSError(err)}
	}
	switch {
	case fi.Mode().IsRegular():
		return []string{path}, nil
	case !fi.IsDir():
		return nil, &FileError{Path: path, Err: errNotFileOrDir}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, &FileError{Path: path, Err: bareFSError(err)}
	}
	var files []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(path, e.Name())
		switch {
		case e.Type().IsRegular():
		case e.Type()&fs.ModeSymlink != 0:
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
		default:
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

var errNotFileOrDir = errors.New("neither a regular file nor a directory")

// bareFSError drops the path from an *fs.PathError, since FileError names
// the file already, and keeps what errors.Is needs (fs.ErrNotExist, …).
func bareFSError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
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

// checkReferencedFiles makes sure the files clientcmd opens or reads while
// building a config are plain files: opening a FIFO blocks, and reading a
// device such as /dev/zero never ends. Missing files are left to clientcmd,
// which reports them.
func checkReferencedFiles(cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	type ref struct {
		field, path string
		limit       int64
	}
	refs := []ref{{"certificate-authority", cluster.CertificateAuthority, 0}}
	if user != nil {
		refs = append(refs,
			ref{"client-certificate", user.ClientCertificate, 0},
			ref{"client-key", user.ClientKey, 0},
			ref{"tokenFile", user.TokenFile, maxTokenFileSize})
	}
	for _, r := range refs {
		if r.path == "" {
			continue
		}
		fi, err := os.Stat(r.path)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s %s is not a regular file", ErrInvalidKubeconfig, r.field, quoteIfOdd(r.path))
		}
		if r.limit > 0 && fi.Size() > r.limit {
			return fmt.Errorf("%w: %s %s is larger than %d bytes", ErrInvalidKubeconfig, r.field, quoteIfOdd(r.path), r.limit)
		}
	}
	return nil
}

// withheld replaces an error message that would have disclosed a secret.
const withheld = "details withheld: the message quoted the kubeconfig"

// decodeMessage returns the message of a decoding error without the parts
// that may quote the kubeconfig. Decoders echo input they choke on, and
// clientcmd's conversion prints a whole list (users and their credentials
// included) when a name appears twice in it; in a kubeconfig, input may be a
// credential.
func decodeMessage(err error, data []byte) string {
	msg := err.Error()
	for _, dump := range []string{": [", ": {", ": map[", ": &"} {
		if i := strings.Index(msg, dump); i >= 0 {
			msg = msg[:i]
		}
	}
	for _, f := range bytes.Fields(data) {
		f = bytes.Trim(f, "\"',:{}[]")
		if len(f) >= 12 && strings.Contains(msg, string(f)) {
			return withheld
		}
	}
	return msg
}

// withoutSecrets returns err's message unless it contains one of user's
// credentials. Messages about a parsed kubeconfig legitimately name files
// and entries, so only the credentials themselves are looked for.
func withoutSecrets(err error, user *clientcmdapi.AuthInfo) string {
	msg := err.Error()
	if user == nil {
		return msg
	}
	secrets := []string{user.Token, user.Password, string(user.ClientKeyData), string(user.ClientCertificateData)}
	if user.AuthProvider != nil {
		for _, v := range user.AuthProvider.Config {
			secrets = append(secrets, v)
		}
	}
	if user.Exec != nil {
		for _, e := range user.Exec.Env {
			secrets = append(secrets, e.Value)
		}
	}
	for _, s := range secrets {
		if len(s) >= 4 && strings.Contains(msg, s) {
			return withheld
		}
	}
	return msg
}

// FileConfigs is what was loaded from one kubeconfig file: its usable
// configs and its problems, as LoadFile returns them.
type FileConfigs struct {
	Path    string
	Configs []*NamedConfig
	Err     error
}

// MergeFileConfigs combines per-file results into one fleet, sorted by name.
// It holds the rules that span files, so that a one-off load and a watcher
// apply the same ones:
//
//   - a context defined in two files is kept from the file whose path sorts
//     first; each other definition is an ErrDuplicateContext *FileError
//     naming both files;
//   - a file that failed to parse and that a usable config names as its
//     certificate-authority, client-certificate, client-key or tokenFile is
//     data, not a broken kubeconfig, and its error is dropped;
//   - every other error of every file is returned, flattened into one
//     errors.Join, alongside the merged configs.
//
// The order of files does not matter; the result is deterministic.
func MergeFileConfigs(files []FileConfigs) ([]*NamedConfig, error) {
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b FileConfigs) int { return strings.Compare(a.Path, b.Path) })

	referenced := map[string]bool{}
	for _, f := range sorted {
		for _, c := range f.Configs {
			if c == nil || c.Config == nil {
				continue
			}
			tls := c.Config.TLSClientConfig
			for _, p := range []string{tls.CAFile, tls.CertFile, tls.KeyFile, c.Config.BearerTokenFile} {
				if p != "" {
					referenced[absClean(p)] = true
				}
			}
		}
	}

	var out []*NamedConfig
	var errs []error
	owner := map[string]string{}
	for _, f := range sorted {
		if f.Err != nil && !(len(f.Configs) == 0 && referenced[absClean(f.Path)] && isParseError(f.Err)) {
			errs = appendFlat(errs, f.Err)
		}
		cfgs := slices.Clone(f.Configs)
		slices.SortStableFunc(cfgs, func(a, b *NamedConfig) int { return strings.Compare(a.Name, b.Name) })
		for _, c := range cfgs {
			if c == nil {
				continue
			}
			if first, dup := owner[c.Name]; dup {
				errs = append(errs, &FileError{Path: f.Path, Context: c.Name, OtherPath: first, Err: ErrDuplicateContext})
				continue
			}
			owner[c.Name] = f.Path
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b *NamedConfig) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}

func absClean(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// isParseError tells a file that is not a kubeconfig at all from one that
// is a kubeconfig with a problem.
func isParseError(err error) bool {
	return errors.Is(err, ErrInvalidKubeconfig) || errors.Is(err, ErrNoContexts)
}

func appendFlat(errs []error, err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			errs = appendFlat(errs, e)
		}
		return errs
	}
	return append(errs, err)
}
