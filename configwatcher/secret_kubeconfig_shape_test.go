package configwatcher

import (
	"errors"
	"strings"
	"testing"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/yamlshape"
)

// A kubeconfig Secret (a kubeconfig Secret of its own, or Cluster API's)
// whose data could decode to more nodes than a kubeconfig may hold is
// refused before it is decoded, with an error naming the key and the
// bound: a sync parses every Secret again, and one such Secret would hold
// hundreds of megabytes each time.
func TestSecretKubeconfigOfManyNodes(t *testing.T) {
	for name, doc := range map[string]string{
		"flow list": "clusters: [" + strings.Repeat("0,", 500_000) + "0]",
		"aliases": "a: &a [" + strings.Repeat("0,", 1000) + "0]\nb: &b [" + strings.Repeat("*a,", 200) + "*a]\n" +
			"clusters: [" + strings.Repeat("*b,", 100) + "*b]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := secretKubeconfig(map[string][]byte{"value": []byte(doc)}, "value", false)
			if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, config.ErrInvalidKubeconfig) || !errors.Is(err, yamlshape.ErrTooManyNodes) || !strings.Contains(err.Error(), `key "value"`) {
				t.Fatalf("secretKubeconfig = %v, want a refusal of the key's size", err)
			}
		})
	}
}
