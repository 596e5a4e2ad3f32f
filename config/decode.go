package config

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/mccr-dev/mccr/internal/yamlshape"
)

// DecodeKubeconfig decodes a kubeconfig as clientcmd.Load does, once its
// shape is known to be bounded: a kubeconfig that could hold more than
// 262,144 YAML nodes, or more than 32 MiB of text, its aliases expanded (a
// file or Secret built to hold gigabytes while it decodes), or that is not
// UTF-8, is refused before decoding. Errors wrap
// ErrInvalidKubeconfig and never quote data (see DecodeErrorMessage).
func DecodeKubeconfig(data []byte) (*clientcmdapi.Config, error) {
	if err := yamlshape.Check(data, maxKubeconfigNodes, maxKubeconfigText); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKubeconfig, err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidKubeconfig, decodeMessage(err, data))
	}
	return kc, nil
}
