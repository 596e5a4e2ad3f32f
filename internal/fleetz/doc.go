// Package fleetz renders the fleet page: a Server's members as one table,
// in HTML for a person (readable without JavaScript, refreshing itself) and
// in JSON for a program, from the same Page.
//
// The page shows names, errors and sources that come from outside the
// program (kubeconfig files, Secrets, objects on the host cluster): every
// one of them is data. The HTML goes through html/template, which escapes
// each value for the context it lands in (text, attribute, URL), so a
// cluster named "<script>…" is shown as those characters and never runs.
//
// The package knows nothing of how the data is gathered: the server
// package fills a Page from the same per-cluster records that
// Server.Status reads, and from its own metric series.
package fleetz
