package config

import (
	"fmt"
	"os"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

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
