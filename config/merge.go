package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
)

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
	return MergeFileConfigsKeeping(files, nil)
}

// MergeFileConfigsKeeping is MergeFileConfigs for a source that is already
// serving clusters: owners maps a context name to the file it is served
// from. While that file is among files and still defines the name, the name
// stays with it, and a newcomer defining the same name is the
// ErrDuplicateContext (naming the newcomer as Path and the owner as
// OtherPath), whatever their paths' order: a file dropped next to a running
// cluster's cannot take the cluster over. Names without an owner go by
// path order, as in MergeFileConfigs.
func MergeFileConfigsKeeping(files []FileConfigs, owners map[string]string) ([]*NamedConfig, error) {
	sorted := slices.Clone(files)
	slices.SortStableFunc(sorted, func(a, b FileConfigs) int { return strings.Compare(a.Path, b.Path) })

	referenced := map[string]bool{}
	for _, f := range sorted {
		for _, c := range f.Configs {
			if c == nil || c.Config == nil {
				continue
			}
			tls := c.Config.TLSClientConfig
			for _, p := range append([]string{tls.CAFile, tls.CertFile, tls.KeyFile, c.Config.BearerTokenFile}, c.refs...) {
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
		for _, c := range f.Configs {
			if c != nil && owners[c.Name] == f.Path && f.Path != "" {
				owner[c.Name] = f.Path
			}
		}
	}
	for _, f := range sorted {
		if f.Err != nil && !isReferencedData(f, referenced) {
			errs = appendFlat(errs, f.Err)
		}
		cfgs := slices.Clone(f.Configs)
		slices.SortStableFunc(cfgs, func(a, b *NamedConfig) int { return strings.Compare(a.Name, b.Name) })
		for _, c := range cfgs {
			if c == nil {
				continue
			}
			if first, dup := owner[c.Name]; dup && first != f.Path {
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

// isReferencedData reports whether f failed to parse only because it is not
// a kubeconfig but data a usable config names (a certificate, key or token
// file): its error is not a broken kubeconfig's. referenced holds the
// absClean paths the configs name.
func isReferencedData(f FileConfigs, referenced map[string]bool) bool {
	return len(f.Configs) == 0 && referenced[absClean(f.Path)] && isParseError(f.Err)
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
