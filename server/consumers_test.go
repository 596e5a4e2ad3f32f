package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcclient "github.com/mccr-dev/mccr/client"
	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/fakeapi"
	"github.com/mccr-dev/mccr/internal/leakcheck"
	"github.com/mccr-dev/mccr/known"
	"github.com/mccr-dev/mccr/server"
	"github.com/mccr-dev/mccr/test"
)

// TestConcurrentConsumersDuringChurn has the shape of Cluster API's
// cluster-cache concurrency test: 50 cluster names, a fifth of them broken
// (closed port, unresolvable host, wrong CA, rejected token), and 50
// goroutines doing Get, List and fleet-wide List with 5s deadlines for a
// minute while names are deleted, re-added and updated. Every call returns
// in time, with the right cluster's data or one of our sentinel errors (or
// its ctx's); a broken cluster never serves data; and once Start returns
// no goroutine is left.
func TestConcurrentConsumersDuringChurn(t *testing.T) {
	run := time.Minute
	if testing.Short() {
		run = 10 * time.Second
	}
	const (
		good      = 40
		broken    = 10
		consumers = 50
		deadline  = 5 * time.Second
		slack     = 2 * time.Second // scheduling on a loaded 2-core machine
	)
	ignore := goleak.IgnoreCurrent()
	fakes := make([]*fakeapi.Server, 4)
	for i := range fakes {
		fakes[i] = fakeapi.New()
		fakes[i].Seed(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "id"},
			Data:       map[string]string{"server": strconv.Itoa(i)},
		})
		fakes[i].Start()
	}
	defer func() {
		for _, f := range fakes {
			f.Close()
		}
	}()

	otherCA := selfSignedCA(t)
	srv, stop := fakeServer(t, nil, configMapController("cms"))
	// configFor returns name's config; variant v changes its content
	// (an Update) but not the server it reaches.
	configFor := func(i, v int) *config.NamedConfig {
		name := fmt.Sprintf("c%02d", i)
		var cfg = fakes[i%len(fakes)].Config()
		cfg.UserAgent = "v" + strconv.Itoa(v%2)
		if i >= good {
			switch i % 4 {
			case 0: // closed port
				nc, err := test.Unreachable(name)
				if err != nil {
					t.Fatal(err)
				}
				nc.Config.UserAgent = cfg.UserAgent
				return nc
			case 1: // a host name that does not resolve (resolved by no one)
				cfg.Host = "https://broken-" + name + ".invalid"
				cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
					return nil, &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}
				}
			case 2: // a CA that did not sign the server's certificate
				cfg.CAData = otherCA
			case 3: // a token the server rejects
				cfg.BearerToken = "rejected"
			}
		}
		return config.NewNamedConfig(name, cfg)
	}
	for i := range good + broken {
		if err := srv.Add(configFor(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range good {
		waitPhase(t, srv, fmt.Sprintf("c%02d", i), server.PhaseReady)
	}

	c := srv.GetClient()
	var calls, served, sentinel, late atomic.Int64
	var problems sync.Map
	problem := func(format string, a ...any) { problems.Store(fmt.Sprintf(format, a...), true) }
	allowed := func(err error) bool {
		return errors.Is(err, mcclient.ErrClusterNotFound) || errors.Is(err, mcclient.ErrClusterNotReady) ||
			errors.Is(err, mcclient.ErrClusterUnreachable) || errors.Is(err, context.DeadlineExceeded) ||
			apierrors.IsTimeout(err) // controller-runtime's "failed waiting for Informer to sync" on a ctx deadline
	}
	wantServer := func(i int) string { return strconv.Itoa(i % len(fakes)) }

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for g := range uint64(consumers) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(g, uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				i := rng.IntN(good + broken)
				name := fmt.Sprintf("c%02d", i)
				cctx, ccancel := context.WithTimeout(context.Background(), deadline)
				begin := time.Now()
				var err error
				switch rng.IntN(3) {
				case 0:
					var cm corev1.ConfigMap
					err = c.Get(known.WithCluster(cctx, name), client.ObjectKey{Namespace: "default", Name: "id"}, &cm)
					if err == nil {
						served.Add(1)
						if i >= good {
							problem("broken cluster %s served a Get", name)
						} else if cm.Data["server"] != wantServer(i) {
							problem("%s served server %s's object", name, cm.Data["server"])
						}
					}
				case 1:
					var cms corev1.ConfigMapList
					err = c.List(known.WithCluster(cctx, name), &cms, client.InNamespace("default"))
					if err == nil {
						served.Add(1)
						if i >= good {
							problem("broken cluster %s served a List", name)
						}
					}
				default:
					var cms corev1.ConfigMapList
					var partial mcclient.Partial
					err = c.List(cctx, &cms, client.InNamespace("default"), &partial)
					if err == nil {
						served.Add(1)
						for _, cm := range cms.Items {
							from := cm.Annotations[known.ClusterAnnotation]
							var j int
							if _, serr := fmt.Sscanf(from, "c%02d", &j); serr != nil || j >= good {
								problem("fleet List returned an item of %q", from)
							} else if cm.Name == "id" && cm.Data["server"] != wantServer(j) {
								problem("fleet List: %s's item came from server %s", from, cm.Data["server"])
							}
						}
						for n, ferr := range partial.Failed {
							if !allowed(ferr) {
								problem("fleet List: %s failed with %v", n, ferr)
							}
						}
					}
				}
				took := time.Since(begin)
				ccancel()
				calls.Add(1)
				if took > deadline+slack {
					late.Add(1)
					problem("a call took %s", took)
				}
				if err != nil {
					if !allowed(err) {
						problem("%s: %v", name, err)
					} else {
						sentinel.Add(1)
					}
				}
			}
		})
	}
	// The churn: names deleted and re-added, and updated, until the
	// consumers are done.
	churn := func(rng *rand.Rand, churned *atomic.Int64) {
		for ctx.Err() == nil {
			i := rng.IntN(good + broken)
			nc := configFor(i, rng.IntN(2))
			switch rng.IntN(3) {
			case 0:
				if err := srv.Delete(nc.Name); err != nil && !errors.Is(err, server.ErrClusterNotFound) {
					t.Errorf("Delete %s: %v", nc.Name, err)
				}
			case 1:
				if err := srv.Add(nc); err != nil && !errors.Is(err, server.ErrClusterExists) {
					t.Errorf("Add %s: %v", nc.Name, err)
				}
			default:
				if err := srv.Update(nc); err != nil && !errors.Is(err, server.ErrClusterNotFound) {
					t.Errorf("Update %s: %v", nc.Name, err)
				}
			}
			churned.Add(1)
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
	}
	var churned atomic.Int64
	var churners sync.WaitGroup
	for g := range uint64(3) {
		churners.Go(func() {
			rng := rand.New(rand.NewPCG(100+g, uint64(time.Now().UnixNano())))
			churn(rng, &churned)
		})
	}
	churners.Wait()
	wg.Wait()
	problems.Range(func(k, _ any) bool {
		t.Error(k)
		return true
	})
	t.Logf("figure: consumers: %d calls by %d goroutines in %s during %d churn operations: %d served data, %d our sentinel or ctx errors, %d late",
		calls.Load(), consumers, run, churned.Load(), served.Load(), sentinel.Load(), late.Load())
	if served.Load() == 0 {
		t.Fatal("no call was ever served: the test checked nothing")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range fakes {
		f.Close()
	}
	leakcheck.VerifyNone(t, ignore)
}

// selfSignedCA returns the PEM of a new CA certificate that signed nothing
// the test talks to.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not the server's CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
