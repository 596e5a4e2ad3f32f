// Package fakeapi is an in-process fake Kubernetes API server for tests.
//
// mccr adds and removes member clusters at run time, and each one brings a
// controller-runtime cache, clients and watches that must start, sync and
// then go away without leaving anything behind. Proving that takes tens of
// thousands of Add/Delete cycles, and a real kube-apiserver (envtest) is far
// too slow for that: it starts in seconds, answers in milliseconds and
// cannot be told to fail. client-go's fake clientsets are fast but skip the
// part that matters, the HTTP transport, discovery, the reflector's
// list/watch protocol and the connections a stopped cluster must close.
//
// A Server speaks enough of the real protocol over loopback HTTPS, with a
// bearer token, that an unmodified rest.Config user (a controller-runtime
// cluster.Cluster, Manager or client) cannot tell the difference for the
// few resources it serves: ConfigMaps and Secrets (namespaced) and
// Namespaces. It answers discovery (/api, /api/v1, /apis, /version, and
// /apis/<group>/<version> for what ServeDiscovery adds),
// get, list (label and field selectors), create, update, patch (merge,
// strategic merge and JSON patch), delete and deletecollection, and watch
// from a resourceVersion, including the streaming watch-list that client-go
// informers use by default (initial ADDED events closed by the
// "k8s.io/initial-events-end" bookmark). Like a kube-apiserver it answers
// objects, lists, watches and errors in protobuf to clients that ask for it
// (controller-runtime and client-go do for these built-in types), each
// object encoded once when written, and in JSON to the others (dynamic
// clients, and those that ask for YAML or tables); discovery is JSON.
// Protobuf request bodies are understood. Clients speak
// HTTP/1.1 to it unless WithHTTP2 offers HTTP/2, as a kube-apiserver does
// (one connection per client then carries every request and watch); with
// WithCertificate it presents a certificate of the test's choosing, such
// as LoopbackCertificate's ECDSA one, which thousands of servers on shared
// cores can afford to handshake with.
//
// Faults can be switched on and off while clients run: latency on every
// request, a 401 for everything, a 403 for one resource, and requests that
// hang until released. RequestCount and OpenWatches let a test see what
// its clients did and whether they let go.
//
// What it does not do: other resources, subresources, server-side apply,
// dry run, finalizers and graceful deletion (deletes are immediate;
// deleting a Namespace deletes what is in it at once), admission,
// validation beyond names and resourceVersions, pagination (lists come
// whole), periodic bookmarks, YAML and CBOR, and conversions to Table or
// PartialObjectMetadata: clients that ask for those get the objects in
// JSON, which the metadata client and kubectl accept. Namespaced objects
// may be created in Namespaces that do not exist.
//
// Close ends every watch and waits for every handler, so a test can check
// with goleak that neither side leaves goroutines behind.
package fakeapi
