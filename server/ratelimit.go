package server

import (
	"k8s.io/client-go/rest"

	"github.com/mccr-dev/mccr/config"
)

// limitRate sets the client-side rate limit of a member's config (the
// lease's copy, which every client of the member is built from): the
// config's own when it sets one (config.SetsRateLimit), else the Server's
// MemberQPS and MemberBurst, by default none.
//
// client-go reads a QPS of zero as 5 per second with a burst of 10, per
// REST client (so per kind). A kubeconfig loaded with clientcmd, which is
// how every watcher builds its configs, leaves QPS at zero; without this a
// member's writes would crawl where controller-runtime's ctrl.GetConfig
// (QPS -1) leaves flow control to the API server.
func limitRate(cfg *rest.Config, o Options) {
	if config.SetsRateLimit(cfg) {
		return
	}
	cfg.QPS = o.MemberQPS
	if cfg.Burst == 0 {
		cfg.Burst = o.MemberBurst
	}
}
