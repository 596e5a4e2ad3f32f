package configwatcher

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	kubefedv1beta1 "github.com/mccr-dev/mccr/apis/kubefed/v1beta1"
	"github.com/mccr-dev/mccr/internal/conntrack"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-48 * time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serve starts a TLS server whose certificate, signed by ca, names only
// dnsName and is valid from notBefore to notAfter. It answers 200 to the
// bearer token "tok" and 401 to anything else.
func (ca *testCA) serve(t *testing.T, dnsName string, notBefore, notAfter time.Time) *httptest.Server {
	t.Helper()
	return ca.serveOn(t, httptest.NewUnstartedServer(nil), dnsName, notBefore, notAfter)
}

// serveOn is serve on a server made by the caller (to set hooks on it).
func (ca *testCA) serveOn(t *testing.T, srv *httptest.Server, dnsName string, notBefore, notAfter time.Time) *httptest.Server {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(dnsName); ip != nil {
		tmpl.DNSNames, tmpl.IPAddresses = nil, []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// tlsGet does one request with a client built from cfg the way
// controller-runtime builds it.
func tlsGet(t *testing.T, cfg *rest.Config, url string) error {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer utilnet.CloseIdleConnectionsFor(hc.Transport)
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

func TestKubeFedTLSValidations(t *testing.T) {
	ca, otherCA := newTestCA(t), newTestCA(t)
	now := time.Now()
	wrongName := ca.serve(t, "other.example", now.Add(-time.Hour), now.Add(time.Hour))
	expired := ca.serve(t, "127.0.0.1", now.Add(-24*time.Hour), now.Add(-time.Hour))
	good := ca.serve(t, "127.0.0.1", now.Add(-time.Hour), now.Add(time.Hour))
	untrusted := otherCA.serve(t, "127.0.0.1", now.Add(-time.Hour), now.Add(time.Hour))

	const (
		none     = ""
		name     = kubefedv1beta1.TLSSubjectName
		validity = kubefedv1beta1.TLSValidityPeriod
		all      = kubefedv1beta1.TLSAll
	)
	cases := []struct {
		srv      *httptest.Server
		srvName  string
		disabled []kubefedv1beta1.TLSValidation
		ok       bool
	}{
		{good, "good", nil, true},
		{good, "good", []kubefedv1beta1.TLSValidation{name, validity}, true},
		{wrongName, "wrong name", nil, false},
		{wrongName, "wrong name", []kubefedv1beta1.TLSValidation{name}, true},
		{wrongName, "wrong name", []kubefedv1beta1.TLSValidation{validity}, false},
		{expired, "expired", nil, false},
		{expired, "expired", []kubefedv1beta1.TLSValidation{validity}, true},
		{expired, "expired", []kubefedv1beta1.TLSValidation{name}, false},
		{untrusted, "untrusted", []kubefedv1beta1.TLSValidation{name, validity}, false},
		{untrusted, "untrusted", []kubefedv1beta1.TLSValidation{all}, true},
	}
	for _, c := range cases {
		spec := kubefedv1beta1.KubeFedClusterSpec{
			// No scheme, as kubefedctl may write it: https is implied.
			APIEndpoint:            strings.TrimPrefix(c.srv.URL, "https://"),
			CABundle:               ca.pem,
			DisabledTLSValidations: c.disabled,
		}
		cfg, err := kubeFedRESTConfig(spec, "tok", nil)
		if err != nil {
			t.Fatalf("%s %v: %v", c.srvName, c.disabled, err)
		}
		err = tlsGet(t, cfg, c.srv.URL)
		if (err == nil) != c.ok {
			t.Errorf("%s server, disabled %v: got error %v, want success=%v", c.srvName, c.disabled, err, c.ok)
		}
	}
}

func TestKubeFedRESTConfig(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	base := kubefedv1beta1.KubeFedClusterSpec{APIEndpoint: "10.0.0.1:6443", CABundle: ca.pem}

	cfg, err := kubeFedRESTConfig(base, "tok", other.pem)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://10.0.0.1:6443" || cfg.BearerToken != "tok" || string(cfg.CAData) != string(ca.pem) ||
		cfg.Insecure || cfg.Proxy != nil || cfg.WrapTransport != nil {
		t.Fatalf("unexpected config %+v", cfg)
	}

	noCA := base
	noCA.CABundle = nil
	if cfg, _ := kubeFedRESTConfig(noCA, "tok", other.pem); cfg == nil || string(cfg.CAData) != string(other.pem) {
		t.Fatal("the Secret's ca.crt is not used when spec.caBundle is empty")
	}

	withProxy := base
	withProxy.ProxyURL = "http://proxy.example:3128"
	cfg, err = kubeFedRESTConfig(withProxy, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, cfg.Host, nil)
	if u, err := cfg.Proxy(req); err != nil || u.String() != withProxy.ProxyURL {
		t.Fatalf("proxy = %v, %v", u, err)
	}

	insecure := base
	insecure.DisabledTLSValidations = []kubefedv1beta1.TLSValidation{kubefedv1beta1.TLSAll}
	cfg, _ = kubeFedRESTConfig(insecure, "tok", nil)
	if cfg == nil || !cfg.Insecure || len(cfg.CAData) != 0 {
		t.Fatal(`"*" must mean Insecure without a CA`)
	}

	for _, bad := range []kubefedv1beta1.KubeFedClusterSpec{
		{APIEndpoint: ""},
		{APIEndpoint: "ftp://x"},
		{APIEndpoint: "x", CABundle: []byte("not PEM")},
		{APIEndpoint: "x", ProxyURL: "proxy.example:3128"},
		{APIEndpoint: "x", DisabledTLSValidations: []kubefedv1beta1.TLSValidation{"Everything"}},
	} {
		if _, err := kubeFedRESTConfig(bad, "tok", nil); !errors.Is(err, ErrKubeFedClusterInvalid) {
			t.Errorf("%+v: got %v, want ErrKubeFedClusterInvalid", bad, err)
		}
	}

	// What the object holds is quoted cut short: a megabyte where an
	// address or a validation goes is an error of the usual size.
	big := strings.Repeat("x", 1<<20)
	for name, bad := range map[string]kubefedv1beta1.KubeFedClusterSpec{
		"apiEndpoint":            {APIEndpoint: "ftp://" + big},
		"proxyURL":               {APIEndpoint: "x", ProxyURL: big},
		"disabledTLSValidations": {APIEndpoint: "x", DisabledTLSValidations: []kubefedv1beta1.TLSValidation{kubefedv1beta1.TLSValidation(big)}},
	} {
		_, err := kubeFedRESTConfig(bad, "tok", nil)
		if !errors.Is(err, ErrKubeFedClusterInvalid) || !strings.Contains(err.Error(), name) || len(err.Error()) > 1024 {
			t.Errorf("%s of a megabyte: got an error of %d bytes: %.200v", name, len(fmt.Sprint(err)), err)
		}
	}
}

// openConns counts the server's open connections as the server sees them.
func openConns(srv *httptest.Server) func() int {
	var mu sync.Mutex
	n := 0
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			n++
		case http.StateClosed, http.StateHijacked:
			n--
		default:
		}
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// A member with relaxed TLS dials through the same connection pool as
// every other member: once its lease is released (the member deleted, or
// the Server stopped), none of its connections stays open. The relaxed
// transport used to dial on its own, out of the pool's sight, and kept one
// connection per client built from the config.
func TestKubeFedRelaxedTLSConnectionsReleased(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	srv := httptest.NewUnstartedServer(nil)
	open := openConns(srv)
	ca.serveOn(t, srv, "other.example", now.Add(-time.Hour), now.Add(time.Hour))

	for _, skip := range [][]kubefedv1beta1.TLSValidation{
		{kubefedv1beta1.TLSSubjectName},
		{kubefedv1beta1.TLSSubjectName, kubefedv1beta1.TLSValidityPeriod},
	} {
		cfg, err := kubeFedRESTConfig(kubefedv1beta1.KubeFedClusterSpec{
			APIEndpoint: srv.URL, CABundle: ca.pem, DisabledTLSValidations: skip,
		}, "tok", nil)
		if err != nil {
			t.Fatal(err)
		}
		var pool conntrack.Pool
		lease, err := pool.Acquire(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// A member's Manager, its probe and its REST mapper each build a
		// client from the config.
		for range 3 {
			hc, err := rest.HTTPClientFor(lease.Config)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Get(srv.URL)
			if err != nil {
				t.Fatalf("%v: %v", skip, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%v: %s", skip, resp.Status)
			}
		}
		before := open()
		if before == 0 {
			t.Fatalf("%v: no connection open while the lease is held", skip)
		}
		lease.Release()
		deadline := time.Now().Add(5 * time.Second)
		for open() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%v: %d connection(s) open before the release, %d after", skip, before, open())
		if n := open(); n != 0 {
			t.Fatalf("%v: %d connection(s) still open after the lease was released", skip, n)
		}
	}
}
