package reach

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/credential"
	"github.com/mccr-dev/mccr/internal/leanmapper"
)

// Check tells, before a member's Manager is built, whether its API server
// answers and accepts the credentials: discovery is open to every
// authenticated user, so 401 or 403 means bad credentials and a dial error
// means unreachable. It fails fast where a Manager would wait for its
// cache sync timeout.
//
// It reads the core group's resource list (GET /api/v1), which it returns:
// the member's REST mapper starts from it (leanmapper.NewWithCore), so the
// check costs no request of its own.
func Check(ctx context.Context, cfg *rest.Config, timeout time.Duration) ([]byte, error) {
	rc, err := restClient(cfg)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := rc.Get().AbsPath(leanmapper.GroupVersionPath("v1")).SetHeader("Accept", "application/json").Do(pctx).Raw()
	if err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("API server %s rejected the credentials: %w", config.RedactURL(cfg.Host), err)
		}
		return nil, fmt.Errorf("API server %s unreachable: %w", config.RedactURL(cfg.Host), err)
	}
	return body, nil
}

// restClient is a client for cfg's API server without a group-version:
// Check and the probe ask for absolute paths. Like the member's own
// clients, it sends a request refused with 401 once more after an exec
// plugin renewed its credential, so that Check and the probe judge the
// fresh one.
func restClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	hc, err := rest.HTTPClientFor(c)
	if err == nil && credential.Refreshes(c) {
		hc = &http.Client{Transport: credential.RetryRefused(hc.Transport), Timeout: hc.Timeout}
	}
	var rc *rest.RESTClient
	if err == nil {
		rc, err = rest.UnversionedRESTClientForConfigAndClient(c, hc)
	}
	if err != nil {
		return nil, config.RedactError(fmt.Errorf("building probe client for %s: %w", config.RedactURL(cfg.Host), err))
	}
	return rc, nil
}

// IsConnectionError reports whether err means no answer came at all (a
// refused, reset or timed-out connection, an unexpected EOF), as opposed
// to an error answer.
func IsConnectionError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}
