package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrFileReferenceRefused means a kubeconfig's certificate-authority,
// client-certificate, client-key or tokenFile leads, after symlinks, out of
// the kubeconfig's own directory, and the caller did not allow that place
// with AllowFileReferences. Whoever writes a kubeconfig chooses the server
// it talks to: a token file path is a way to send any local file (the
// controller's own ServiceAccount token, say) to that server.
var ErrFileReferenceRefused = errors.New("file reference refused (files outside the kubeconfig's directory need AllowFileReferences)")

// fileRef is one file path of a kubeconfig entry and where its content goes
// when mccr reads it itself.
type fileRef struct {
	field string
	path  *string
	data  *[]byte // nil for the token file, whose content is a string
	token *string
	other string // the field that must not be set as well, or ""
	set   bool   // whether other is set
}

// checkFileReferences applies the file reference rules to one context's
// cluster and user (copies, changed in place) before clientcmd sees them,
// and returns the files they named. Nothing is opened before it is known to
// be allowed, and nothing that is not a regular file is read.
//
// By default every path must resolve inside dir; each file is then read
// here, once, and its content replaces the path, so that nothing swapped in
// after the check is ever read. With AllowFileReferences the paths that
// lead into the caller's roots are left for client-go, which reads them
// again later (rotation); only their place, type and size are checked.
// Those that lead into dir are still read here: dir is not the caller's to
// vouch for. With AllowFileReferences and no roots every path is left to
// client-go, whatever it leads to.
//
// read lists the files whose content the context takes by the default rule
// (see NamedConfig.FilesRead), even when err is set: those checked and read
// before the problem, and the one that could not be resolved or read if its
// path, as written, lies in dir, so that a watcher sees it come back. A
// reference that is refused is never in it.
func checkFileReferences(dir string, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo, o LoadOptions) (named, read []string, err error) {
	refs := []fileRef{{
		field: "certificate-authority", path: &cluster.CertificateAuthority, data: &cluster.CertificateAuthorityData,
		other: "certificate-authority-data", set: len(cluster.CertificateAuthorityData) > 0,
	}}
	if user != nil {
		refs = append(refs,
			fileRef{
				field: "client-certificate", path: &user.ClientCertificate, data: &user.ClientCertificateData,
				other: "client-certificate-data", set: len(user.ClientCertificateData) > 0,
			},
			fileRef{
				field: "client-key", path: &user.ClientKey, data: &user.ClientKeyData,
				other: "client-key-data", set: len(user.ClientKeyData) > 0,
			},
			// A token next to a token file is not an error for clientcmd,
			// but client-go then sends the file: check the file all the same.
			fileRef{field: "tokenFile", path: &user.TokenFile, token: &user.Token})
	}

	for _, r := range refs {
		if *r.path == "" {
			continue
		}
		named = append(named, *r.path)
	}
	if o.AnyFileReferences {
		return named, nil, checkRegular(refs)
	}

	allowed, written, err := allowedRoots(dir, o.FileReferenceRoots)
	if err != nil {
		return nil, nil, err
	}
	// allowed[0] is the kubeconfig's own directory, resolved (written[0]
	// as given): whoever writes the kubeconfig writes it too, and may swap
	// a checked file for a link to anywhere. Only the caller's roots are
	// trusted to keep what was checked, so only their files are left to
	// client-go, and only by a path that lies in one as written, not only
	// once resolved: a path through any other directory (the kubeconfig's
	// own, /tmp) passes links that their writer may point elsewhere after
	// the check.
	own, ownWritten := allowed[:1], written[:1]
	roots := append(slices.Clone(allowed[1:]), written[1:]...)
	// failed is the read list that goes with an error about path p.
	failed := func(p string) []string {
		if !within(filepath.Clean(p), ownWritten) {
			return read
		}
		return append(read, p)
	}
	for _, r := range refs {
		p := *r.path // absolute: clientcmd resolved it against the file
		if p == "" {
			continue
		}
		resolved, err := filepath.EvalSymlinks(p)
		if err != nil {
			// Not %w: a missing referenced file must not read as the
			// kubeconfig itself gone (fs.ErrNotExist) to a watcher.
			return nil, failed(p), fmt.Errorf("%w: %s %s cannot be resolved: %v", ErrInvalidKubeconfig, r.field, quoteRef(p), bareFSError(err)) //nolint:errorlint // see above
		}
		if !within(resolved, allowed) {
			return nil, read, fmt.Errorf("%w: %s %s leads out of %s", ErrFileReferenceRefused, r.field, quoteRef(p), quoteIfOdd(dir))
		}
		w := filepath.Clean(p)
		trusted := !within(resolved, own) && !within(w, ownWritten) && !within(w, own) && within(w, roots)
		if r.set && !trusted {
			return nil, read, fmt.Errorf("%w: both %s and %s are set", ErrInvalidKubeconfig, r.field, r.other)
		}
		data, err := readReferenced(resolved, allowed)
		if err != nil {
			return nil, failed(p), fmt.Errorf("%w: %s %s: %v", ErrInvalidKubeconfig, r.field, quoteRef(p), err) //nolint:errorlint // as above
		}
		if trusted {
			continue
		}
		read = append(read, p)
		if r.token != nil {
			// client-go trims a token file's content the same way.
			*r.token = strings.TrimSpace(string(data))
		} else {
			*r.data = data
		}
		*r.path = ""
	}
	return named, read, nil
}

// checkRegular is the rule for files the caller trusts: opening a FIFO
// blocks and reading a device such as /dev/zero never ends, so only regular
// files of bounded size are left to clientcmd. Missing files are left to
// clientcmd, which reports them.
func checkRegular(refs []fileRef) error {
	for _, r := range refs {
		if *r.path == "" {
			continue
		}
		fi, err := os.Stat(*r.path)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s %s is not a regular file", ErrInvalidKubeconfig, r.field, quoteRef(*r.path))
		}
		if fi.Size() > maxReferencedFileSize {
			return fmt.Errorf("%w: %s %s is larger than %d bytes", ErrInvalidKubeconfig, r.field, quoteRef(*r.path), maxReferencedFileSize)
		}
	}
	return nil
}

// allowedRoots resolves the kubeconfig's directory and the caller's roots
// (resolved), and gives them absolute as written (written), index for
// index; a root that does not exist allows nothing and is left out.
func allowedRoots(dir string, roots []string) (resolved, written []string, err error) {
	for i, d := range append([]string{dir}, roots...) {
		abs, err := filepath.Abs(d)
		r := ""
		if err == nil {
			r, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			if i == 0 {
				return nil, nil, fmt.Errorf("%w: resolving the kubeconfig's directory: %v", ErrInvalidKubeconfig, bareFSError(err)) //nolint:errorlint // as above
			}
			continue
		}
		resolved, written = append(resolved, r), append(written, abs)
	}
	return resolved, written, nil
}

// within says whether the resolved path p lies under one of roots.
func within(p string, roots []string) bool {
	for _, r := range roots {
		rel, err := filepath.Rel(r, p)
		if err != nil || filepath.IsAbs(rel) {
			continue
		}
		if rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// readReferenced reads a resolved, allowed path (see readRegular), whose
// file must still lie within roots once opened.
func readReferenced(resolved string, roots []string) ([]byte, error) {
	return readRegular(resolved, maxReferencedFileSize, roots)
}
