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

// A kubeconfig Secret's server or proxy address of a megabyte is quoted in
// its error cut short: the error names the key and says what is wrong, at
// its usual size.
func TestSecretKubeconfigErrorsQuoteAddressesCut(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for name, cluster := range map[string]string{
		"server no URL":     `server: "h:1/` + big + `"`,
		"server no host":    `server: "::` + big + `"`,
		"proxy-url no URL":  `server: "https://h", proxy-url: "::` + big + `"`,
		"password in a cut": `server: "h:1/` + big + `@h"`,
		// A file named by a cluster or a user whose name is a megabyte.
		"names of a cluster with a file": "clusters:\n- name: c" + big + "\n  cluster: {server: \"https://h\", certificate-authority: ca}\ncontexts:\n- name: a\n  context: {cluster: c" + big + "}\n",
		"names of a user with a file":    "clusters:\n- name: c\n  cluster: {server: \"https://h\"}\nusers:\n- name: u" + big + "\n  user: {tokenFile: t}\ncontexts:\n- name: a\n  context: {cluster: c, user: u" + big + "}\n",
	} {
		t.Run(name, func(t *testing.T) {
			kc := "clusters:\n- name: c\n  cluster: {" + cluster + "}\ncontexts:\n- name: a\n  context: {cluster: c}\n"
			if strings.HasPrefix(name, "names of ") {
				kc = cluster
			}
			_, err := secretKubeconfig(map[string][]byte{"value": []byte(kc)}, "value", false)
			want := ErrSecretInvalid
			if strings.HasPrefix(name, "names of ") {
				want = config.ErrFileReferenceRefused
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), `key "value"`) {
				t.Fatalf("secretKubeconfig = %.300v, want %v naming the key", err, want)
			}
			if n := len(err.Error()); n > 2*config.MaxErrorMessage {
				t.Fatalf("an error of %d bytes: %.300s…", n, err)
			}
		})
	}
}
