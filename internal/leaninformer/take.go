package leaninformer

import (
	"context"
	"io"
	"mime"
	"net/http"
	goruntime "runtime"
	"sync"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Watch streams read here: a Runner's informer reads the stream of its
// watch itself (stream.go) instead of through client-go's watch, whose
// decoder goroutine holds the stack it grew while decoding the initial
// list (8 KiB) and buffers that grew to the largest event, for as long as
// the watch lasts. The ListerWatcher still makes the request, with
// client-go, and the HTTP client's transport hands the response over
// (TakeWatch): client-go is given the same response with an empty body,
// counts and logs it as the watch it is, and its watch ends at once.
//
// What an informer decodes is what the client its ListerWatcher uses
// would: controller-runtime's cache lists and watches typed objects with
// a REST client on its Scheme's codecs (RunnerOptions.Scheme),
// unstructured ones with client-go's dynamic client, and metadata-only
// ones with client-go's metadata client, whose watch controller-runtime
// wraps to set the kind of every object. Streams framed otherwise than as
// protobuf or JSON (CBOR, which client-go may ask for behind a feature
// gate), informers of other types, and watches that are not client-go's
// REST watch are left to client-go.

// RunnerOptions are the options of a Runner.
type RunnerOptions struct {
	// Scheme decodes the watch streams of typed objects, as the cache
	// whose informers the Runner runs does with the same Scheme
	// (controller-runtime's cache.Options.Scheme). Nil leaves those
	// streams to client-go's watch.
	Scheme *runtime.Scheme
}

// runKey is the key of the runState in the context of an informer's
// requests, for TakeWatch and RunnerContext.
type runKey struct{}

// RunnerContext returns the context given to NewRunner if ctx is that of
// a request of one of the Runner's informers (or derives from it), nil
// otherwise. Such a request ends when that context ends: a transport that
// cuts requests when a context ends can send these as they are.
func RunnerContext(ctx context.Context) context.Context {
	st, ok := ctx.Value(runKey{}).(*runState)
	if !ok || st.i.runner == nil {
		return nil
	}
	return st.i.runner.parent
}

// TakeWatch hands the response to a watch request of a Runner's informer
// to the informer, which reads its stream itself, and returns what the
// transport returns instead: the same response with an empty body. It is
// called by the outermost http.RoundTripper of the client the informers'
// ListerWatchers use, with every response; it takes only a watch that
// succeeded, that the informer asked for, framed and encoded as the
// informer decodes, and returns resp and false otherwise.
func TakeWatch(req *http.Request, resp *http.Response) (*http.Response, bool) {
	if resp == nil || resp.StatusCode != http.StatusOK {
		return resp, false
	}
	st, ok := req.Context().Value(runKey{}).(*runState)
	if !ok || st.i.family == nil {
		return resp, false
	}
	return st.take(resp)
}

// takeSlot is where TakeWatch leaves the stream of the watch an informer
// is opening.
type takeSlot struct {
	mu     sync.Mutex
	armed  bool
	stream *takenStream
}

// takenStream is a watch's response body and how to read it.
type takenStream struct {
	body    io.ReadCloser
	framing framing
	events  runtime.Decoder // the stream's frames: metav1.WatchEvent
	objects runtime.Decoder // the events' objects
}

// take keeps resp's body for the watch being opened, if the informer
// asked for one and decodes what resp carries.
func (st *runState) take(resp *http.Response) (*http.Response, bool) {
	s := &st.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed || s.stream != nil {
		return resp, false
	}
	ts := st.i.family.streamFor(resp.Header.Get("Content-Type"))
	if ts == nil {
		return resp, false
	}
	ts.body = resp.Body
	s.stream = ts
	placeholder := *resp
	placeholder.Body = http.NoBody
	// x/net keeps the response it returned for as long as the stream
	// lasts, and reads its header no more: the header map (some 0.6 KiB
	// per watch) goes with the placeholder once client-go has read it.
	resp.Header = nil
	return &placeholder, true
}

// openWatch opens a watch with the informer's ListerWatcher and, where
// the transport hands the stream over, returns a watch that reads it here.
// Called by a connect goroutine.
func (st *runState) openWatch(opts metav1.ListOptions) (watch.Interface, error) {
	i := st.i
	if i.family == nil || st.untaken {
		return i.lw.WatchWithContext(st.ctx, opts)
	}
	s := &st.slot
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
	w, err := i.lw.WatchWithContext(st.ctx, opts)
	s.mu.Lock()
	ts := s.stream
	s.armed, s.stream = false, nil
	s.mu.Unlock()
	if ts == nil {
		return w, err
	}
	if err != nil {
		_ = ts.body.Close()
		return nil, err
	}
	w.Stop() // client-go's, on an empty body: it has ended or is ending
	if _, plain := w.(*watch.StreamWatcher); !plain && !i.family.wrapped {
		// The ListerWatcher does something with client-go's watch that
		// reading the stream here would skip: leave its watches to it,
		// from this one on.
		_ = ts.body.Close()
		st.untaken = true
		st.logger.V(4).Info("Watch is not client-go's REST watch: its stream is read by client-go", "type", st.description(), "watch", w)
		return i.lw.WatchWithContext(st.ctx, opts)
	}
	return newStreamWatch(ts, i.family.gvk, st.logger), nil
}

// family is how the watch streams of an informer's objects are decoded.
type family struct {
	serializer runtime.NegotiatedSerializer
	// gvk, when set, is set on every object decoded, as controller-runtime
	// does on the watch of metadata-only objects (wrapped).
	gvk     *schema.GroupVersionKind
	wrapped bool
}

// familyOf is how the watch streams of informers of example are decoded
// (see the top of this file), nil when they are left to client-go.
func familyOf(example runtime.Object, scheme *runtime.Scheme) *family {
	switch o := example.(type) {
	case runtime.Unstructured:
		return unstructuredFamily()
	case *metav1.PartialObjectMetadata:
		gvk := o.GroupVersionKind()
		if gvk.Empty() {
			return nil
		}
		return &family{serializer: metadataSerializer(), gvk: &gvk, wrapped: true}
	}
	if scheme == nil {
		return nil
	}
	if _, _, err := scheme.ObjectKinds(example); err != nil {
		return nil
	}
	return typedFamily(scheme)
}

// streamFor is how to read a stream of contentType, nil if this family
// does not read it here.
func (f *family) streamFor(contentType string) *takenStream {
	// As client-go's REST watch: a content type that does not parse picks
	// the serializer's first media type.
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		mediaType, params = "", nil
	}
	objects, events, framer, err := runtime.NewClientNegotiator(f.serializer, schema.GroupVersion{}).StreamDecoder(mediaType, params)
	if err != nil {
		return nil
	}
	ts := &takenStream{events: events, objects: objects}
	switch framer {
	case protobuf.LengthDelimitedFramer:
		ts.framing = lengthPrefixed
	case json.Framer:
		ts.framing = jsonValues
	default:
		return nil
	}
	return ts
}

// unstructuredFamily and metadataSerializer are those of client-go's
// dynamic and metadata clients, which controller-runtime's cache uses.
var (
	unstructuredFamily = sync.OnceValue(func() *family {
		return &family{serializer: dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer}
	})
	metadataSerializer = sync.OnceValue(func() runtime.NegotiatedSerializer {
		return metadata.ConfigFor(&rest.Config{}).NegotiatedSerializer
	})
)

// typedFamilies holds the family of each Scheme in use, shared by every
// Runner with that Scheme (a fleet's members share one: its codecs are
// built once, not once per cluster). An entry lives as long as a Runner
// holds its family.
var typedFamilies struct {
	mu sync.Mutex
	m  map[weak.Pointer[runtime.Scheme]]weak.Pointer[family]
}

// typedFamily decodes typed objects as controller-runtime's cache does:
// with a REST client on the codecs of its Scheme, without conversion.
func typedFamily(scheme *runtime.Scheme) *family {
	key := weak.Make(scheme)
	typedFamilies.mu.Lock()
	defer typedFamilies.mu.Unlock()
	if f := typedFamilies.m[key].Value(); f != nil {
		return f
	}
	if typedFamilies.m == nil {
		typedFamilies.m = map[weak.Pointer[runtime.Scheme]]weak.Pointer[family]{}
	}
	f := &family{serializer: serializer.WithoutConversionCodecFactory{CodecFactory: serializer.NewCodecFactory(scheme)}}
	typedFamilies.m[key] = weak.Make(f)
	goruntime.AddCleanup(f, forgetTypedFamily, key)
	return f
}

// forgetTypedFamily drops the entry of a Scheme whose family no Runner
// holds any more, unless another has taken its place.
func forgetTypedFamily(key weak.Pointer[runtime.Scheme]) {
	typedFamilies.mu.Lock()
	defer typedFamilies.mu.Unlock()
	if typedFamilies.m[key].Value() == nil {
		delete(typedFamilies.m, key)
	}
}
