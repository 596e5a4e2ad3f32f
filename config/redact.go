package config

import (
	"bytes"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

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
