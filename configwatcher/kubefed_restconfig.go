package configwatcher

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/config"
)

// kubeFedRESTConfig turns a KubeFedCluster's spec and its Secret's token
// (and ca.crt, used when the spec has no CA bundle) into a rest.Config, as
// the KubeFedWatcher doc describes.
func kubeFedRESTConfig(spec kubefedv1beta1.KubeFedClusterSpec, token string, secretCA []byte) (*rest.Config, error) {
	u, err := kubeFedEndpoint(spec.APIEndpoint)
	if err != nil {
		return nil, err
	}
	ca, caFrom := spec.CABundle, "spec.caBundle"
	if len(ca) == 0 {
		ca, caFrom = secretCA, "the Secret's "+kubeFedCAKey
	}
	var roots *x509.CertPool
	if len(ca) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrKubeFedClusterInvalid, caFrom)
		}
	}
	cfg := &rest.Config{
		Host:            u.String(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
	}
	proxy := http.ProxyFromEnvironment
	if spec.ProxyURL != "" {
		pu, err := url.Parse(spec.ProxyURL)
		if err != nil || pu.Scheme == "" || pu.Host == "" {
			return nil, fmt.Errorf("%w: spec.proxyURL %s is not an absolute URL", ErrKubeFedClusterInvalid, config.QuoteAddress(spec.ProxyURL))
		}
		proxy = http.ProxyURL(pu)
		cfg.Proxy = proxy
	}

	var skipAll, skipName, skipValidity bool
	for _, v := range spec.DisabledTLSValidations {
		switch v {
		case kubefedv1beta1.TLSAll:
			skipAll = true
		case kubefedv1beta1.TLSSubjectName:
			skipName = true
		case kubefedv1beta1.TLSValidityPeriod:
			skipValidity = true
		default:
			return nil, fmt.Errorf("%w: spec.disabledTLSValidations: unknown value %s", ErrKubeFedClusterInvalid, config.QuoteName(string(v)))
		}
	}
	switch {
	case skipAll:
		cfg.Insecure = true
		cfg.CAData = nil
	case skipName || skipValidity:
		cfg.WrapTransport = relaxedTLSTransport(u.Hostname(), roots, proxy, skipName, skipValidity)
	}
	return cfg, nil
}

// kubeFedEndpoint parses spec.apiEndpoint, which KubeFed allows to be a
// hostname, hostname:port, IP or IP:port as well as a URL. Without a scheme
// it is https: left to client-go, a host without a scheme and without a CA
// would be spoken to over plain http, bearer token included.
func kubeFedEndpoint(endpoint string) (*url.URL, error) {
	endpoint = strings.TrimSpace(endpoint)
	if endpoint == "" {
		return nil, fmt.Errorf("%w: spec.apiEndpoint is empty", ErrKubeFedClusterInvalid)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("%w: spec.apiEndpoint %s is not a host or an http(s) URL", ErrKubeFedClusterInvalid, config.QuoteAddress(endpoint))
	}
	return u, nil
}
