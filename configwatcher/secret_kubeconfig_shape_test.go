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
		// Few nodes, but each alias repeats a long token: 100 MiB of JSON.
		"aliased text": "users:\n- name: a\n  user: {token: &t " + strings.Repeat("x", 256<<10) + "}\n" +
			"x: [" + strings.Repeat("*t,", 400) + "*t]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := secretKubeconfig(map[string][]byte{"value": []byte(doc)}, "value", false)
			if !errors.Is(err, ErrSecretInvalid) || !errors.Is(err, config.ErrInvalidKubeconfig) || !errors.Is(err, yamlshape.ErrTooManyNodes) && !errors.Is(err, yamlshape.ErrTooMuchText) || !strings.Contains(err.Error(), `key "value"`) {
				t.Fatalf("secretKubeconfig = %v, want a refusal of the key's size", err)
			}
		})
	}
}
