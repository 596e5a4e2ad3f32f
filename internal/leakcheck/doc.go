// Package leakcheck fails a test whose goroutines outlive it, with the
// patience a loaded machine needs.
//
// goleak's own retries give up after about half a second. Goroutines that
// end by themselves shortly after what started them stopped (an HTTP
// connection's reader after its server closed, a watch's decoder after its
// stream ended, a request controller-runtime issues without a context
// finishing its retry) can take longer than that on a machine whose cores
// are busy with other tests. A goroutine that is still there after
// Patience is a leak.
package leakcheck
