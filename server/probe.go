package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mccr-dev/mccr/config"
	"github.com/mccr-dev/mccr/internal/leanmapper"
)

// probe checks, before a Manager is built, that the API server answers and
// accepts the credentials: discovery is open to every authenticated user,
// so 401 or 403 means bad credentials and a dial error means unreachable.
// It fails fast where a Manager would wait for its cache sync timeout.
//
// It reads the core group's resource list (GET /api/v1), which it returns:
// the member's REST mapper starts from it (leanmapper.NewWithCore), so the
// probe costs no request of its own.
func probe(ctx context.Context, cfg *rest.Config, timeout time.Duration) ([]byte, error) {
	c := rest.CopyConfig(cfg)
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, config.RedactError(fmt.Errorf("building probe client: %w", err))
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

func isConnectionError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// funcName is the name of the function f, "(*Reconciler).SetupWithManager"
// for a method value, as the runtime knows it.
func funcName(f func(ctrl.Manager) error) string {
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	if fn == nil {
		return "unknown"
	}
	name := fn.Name()
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return strings.TrimSuffix(name, "-fm")
}
