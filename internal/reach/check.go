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

// check asks, through rc, whether host's API server answers and accepts
// the credentials (see Monitor.Check), and returns the core group's
// resource list.
func check(ctx context.Context, rc *rest.RESTClient, host string, timeout time.Duration) ([]byte, error) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := rc.Get().AbsPath(leanmapper.GroupVersionPath("v1")).SetHeader("Accept", "application/json").Do(pctx).Raw()
	if err != nil {
		if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("API server %s rejected the credentials: %w", host, err)
		}
		return nil, fmt.Errorf("API server %s unreachable: %w", host, err)
	}
	return body, nil
}

// restClient is a client for cfg's API server without a group-version,
// sending through hc, a client built from cfg: Check and the probe ask for
// absolute paths. Like the member's own clients, it sends a request
// refused with 401 once more after an exec plugin renewed its credential,
// so that Check and the probe judge the fresh one.
func restClient(cfg *rest.Config, hc *http.Client) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	if credential.Refreshes(c) {
		hc = &http.Client{Transport: credential.RetryRefused(hc.Transport), Timeout: hc.Timeout, Jar: hc.Jar}
	}
	rc, err := rest.UnversionedRESTClientForConfigAndClient(c, hc)
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
