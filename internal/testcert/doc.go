// Package testcert makes the certificates tests need: a self-signed
// certificate that serves as a CA and as a client certificate, with its
// key, as a kubeconfig or a cluster Secret carries them.
package testcert
