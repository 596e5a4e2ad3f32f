package test

import (
	"fmt"
	"net"

	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// Unreachable returns a cluster config whose API server address is a
// loopback port nothing listens on (it was free a moment ago), for tests of
// what a Server does with a member it cannot reach. No request ever leaves
// the machine.
func Unreachable(name string) (*config.NamedConfig, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("test: finding a free loopback port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return nil, err
	}
	return config.NewNamedConfig(name, &rest.Config{
		Host:            "https://" + addr,
		BearerToken:     "not-a-real-token",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
	}), nil
}
