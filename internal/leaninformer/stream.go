package leaninformer

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/klog/v2"
)

// framing is how the events of a watch stream are delimited.
type framing uint8

const (
	lengthPrefixed framing = iota + 1 // protobuf: a 4-byte big-endian length, then the event
	jsonValues                        // JSON: one value after another
)

// maxFrame is the largest event read, as client-go's streaming decoder
// reads: a larger one ends the watch with an error event.
const maxFrame = 16 << 20

// streamWatch is a watch whose stream is read here rather than by
// client-go's watch (see take.go). It delivers what client-go's would, in
// the same way: an unbuffered result channel, closed when the stream ends;
// an event that cannot be read or decoded is delivered as an error event
// and ends the watch; an end of the stream (cleanly or not, or a timeout)
// ends it without one. Once a pump follows it (follow), after the initial
// events of a streamed list have come through the channel, it hands its
// events to the pump instead, and reads the next only when the pump asks.
//
// Each event is read by a goroutine of its own, which hands the event on,
// starts the next one's and ends. A goroutine's stack grows to what its
// deepest call needed (decoding an object, the HTTP/2 flow-control write
// that a read may make) and is not given back while the goroutine waits:
// client-go's decoder of a watch keeps the 8 KiB it grew to while
// decoding the initial list for as long as the watch lasts. The goroutine
// that waits for the next event here has done nothing but that read.
// While it waits it holds no buffer either: it reads the first bytes of
// the next event into a small array, and a buffer of a pool then.
type streamWatch struct {
	body    io.ReadCloser
	framing framing
	frame   frameSource
	decoder *restclientwatch.Decoder
	gvk     *schema.GroupVersionKind // set on every object, when set
	logger  klog.Logger

	result chan watch.Event
	done   chan struct{} // closed by Stop
	stop   sync.Once

	// pumped is closed once a pump follows the watch, which deliver then
	// hands the events to (set before pumped is closed, under mu).
	pumped  chan struct{}
	mu      sync.Mutex
	deliver func(watch.Event, bool)
	// endedUnfollowed is set when the watch ended before a pump followed
	// it, for follow to tell the pump.
	endedUnfollowed bool

	// rest holds, on a JSON stream, what the last read took past the end
	// of its event, for the next event's reader; nil when none.
	rest *[]byte
}

var _ watch.Interface = (*streamWatch)(nil)

func newStreamWatch(ts *takenStream, gvk *schema.GroupVersionKind, logger klog.Logger) *streamWatch {
	w := &streamWatch{
		body:    ts.body,
		framing: ts.framing,
		frame:   frameSource{events: ts.events},
		gvk:     gvk,
		logger:  logger,
		result:  make(chan watch.Event),
		done:    make(chan struct{}),
		pumped:  make(chan struct{}),
	}
	w.decoder = restclientwatch.NewDecoder(&w.frame, ts.objects)
	go w.receive()
	return w
}

// ResultChan returns the watch's events, until a pump follows it.
func (w *streamWatch) ResultChan() <-chan watch.Event { return w.result }

var _ followedWatch = (*streamWatch)(nil)

// follow hands the watch's events to deliver from now on. The reader under
// way hands its event over when it has it, and the next reader starts when
// the pump asks (next).
func (w *streamWatch) follow(deliver func(watch.Event, bool)) {
	w.mu.Lock()
	w.deliver = deliver
	ended := w.endedUnfollowed
	close(w.pumped)
	w.mu.Unlock()
	if ended {
		deliver(watch.Event{}, true)
	}
}

// next starts the next event's reader.
func (w *streamWatch) next() { go w.receive() }

// Stop ends the watch: its stream is closed, and nothing more is sent.
func (w *streamWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		_ = w.body.Close()
	})
}

// receive waits for the next event's first bytes, in a goroutine started
// for it: the goroutine an idle watch costs. It does no more than that
// read, so that it runs on the smallest stack (see streamWatch).
func (w *streamWatch) receive() {
	if w.rest != nil {
		w.event([4]byte{}, 0, nil)
		return
	}
	var head [4]byte
	n, err := w.body.Read(head[:])
	w.event(head, n, err)
}

// event reads the rest of an event whose first n bytes are in head,
// decodes it and hands it on, then starts the next event's reader; or
// ends the watch.
//
// It is not inlined into receive: its frame would then be part of the
// waiting goroutine's stack.
//
//go:noinline
func (w *streamWatch) event(head [4]byte, n int, err error) {
	defer utilruntime.HandleCrashWithLogger(w.logger)
	var buf *[]byte
	var frame []byte
	if w.framing == lengthPrefixed {
		buf, frame, err = w.readPrefixed(head, n, err)
	} else {
		buf, frame, err = w.readJSON(head[:n], err)
	}
	var e watch.Event
	if err == nil {
		e, err = w.decode(frame)
	}
	putBuffer(buf)
	if err != nil {
		w.end(err)
		return
	}
	switch w.hand(e) {
	case handedToChannel:
		go w.receive()
	case handedToPump: // the pump asks for the next (next)
	case stopped:
		w.end(nil)
	}
}

type handing uint8

const (
	handedToChannel handing = iota
	handedToPump
	stopped
)

// hand hands e over: to the pump that follows the watch, or through the
// result channel until one does.
func (w *streamWatch) hand(e watch.Event) handing {
	select {
	case <-w.done:
		return stopped
	case <-w.pumped:
		w.deliver(e, false)
		return handedToPump
	default:
	}
	select {
	case <-w.done:
		return stopped
	case w.result <- e:
		return handedToChannel
	case <-w.pumped:
		w.deliver(e, false)
		return handedToPump
	}
}

// end closes the watch after err, as client-go's watch does: the end of
// the stream, or a timeout, quietly; anything else as an error event,
// unless the watch was stopped.
func (w *streamWatch) end(err error) {
	defer close(w.result)
	defer w.Stop()
	defer w.handEnd()
	switch {
	case err == nil, err == io.EOF: //nolint:errorlint // as client-go: the reader's own EOF, not one wrapped
	case err == io.ErrUnexpectedEOF: //nolint:errorlint // as above
		w.logger.V(1).Info("Unexpected EOF during watch stream event decoding", "err", err)
	case utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err):
		w.logger.V(5).Info("Unable to decode an event from the watch stream", "err", err)
	default:
		w.hand(watch.Event{Type: watch.Error, Object: decodingReporter.AsObject(fmt.Errorf("unable to decode an event from the watch stream: %w", err))})
	}
}

// handEnd tells the pump that follows the watch, unless it stopped the
// watch, that the watch has ended; or, without a pump yet, the pump that
// follows it later (follow). Until then, closing the result channel tells.
func (w *streamWatch) handEnd() {
	w.mu.Lock()
	deliver := w.deliver
	w.endedUnfollowed = deliver == nil
	w.mu.Unlock()
	select {
	case <-w.done: // stopped: nobody waits for its end
	default:
		if deliver != nil {
			deliver(watch.Event{}, true)
		}
	}
}

// decodingReporter makes the error event of a stream that could not be
// read, as client-go's REST watch does.
var decodingReporter = apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")

// decode decodes one event, as client-go's REST watch does. A decoder that
// panics on what the server sent fails the event instead of the process.
func (w *streamWatch) decode(frame []byte) (e watch.Event, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoding a watch event panicked: %v", r)
		}
	}()
	w.frame.data = frame
	defer func() { w.frame.data = nil }()
	typ, obj, err := w.decoder.Decode()
	if err != nil {
		return e, err
	}
	if w.gvk != nil {
		obj.GetObjectKind().SetGroupVersionKind(*w.gvk)
	}
	return watch.Event{Type: typ, Object: obj}, nil
}

// frameSource hands the event read to client-go's watch decoder, as its
// streaming decoder hands the frames it reads.
type frameSource struct {
	events runtime.Decoder
	data   []byte
}

var _ streaming.Decoder = (*frameSource)(nil)

func (s *frameSource) Decode(defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	return s.events.Decode(s.data, defaults, into)
}

func (s *frameSource) Close() error { return nil }

// readPrefixed reads a length-prefixed event whose first n bytes are in
// head (read with err), as client-go's length-delimited frame reader.
func (w *streamWatch) readPrefixed(head [4]byte, n int, err error) (*[]byte, []byte, error) {
	if n < len(head) {
		if err == nil {
			_, err = io.ReadFull(w.body, head[n:])
		}
		if err != nil {
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
	}
	size := binary.BigEndian.Uint32(head[:])
	if size > maxFrame {
		return nil, nil, streaming.ErrObjectTooLarge
	}
	buf := getBuffer(int(size))
	frame := (*buf)[:size]
	if _, err := io.ReadFull(w.body, frame); err != nil {
		putBuffer(buf)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	return buf, frame, nil
}

// readJSON reads a JSON event: the bytes left over by the last read, or
// first (read with err), then more until a whole value is read. What it
// reads past the value is left for the next event's reader.
func (w *streamWatch) readJSON(first []byte, err error) (*[]byte, []byte, error) {
	var buf *[]byte // holds what was read so far
	if w.rest != nil {
		buf, w.rest = w.rest, nil
	} else {
		buf = getBuffer(len(first))
		*buf = append(*buf, first...)
	}
	sc := jsonScanner{start: -1}
	scanned := 0
	for {
		data := *buf
		end, serr := sc.scan(data, scanned)
		if serr != nil {
			putBuffer(buf)
			return nil, nil, serr
		}
		if end >= 0 {
			w.keepRest(data[end:])
			return buf, data[sc.start:end], nil
		}
		scanned = len(data)
		if err != nil {
			putBuffer(buf)
			if err == io.EOF && sc.start >= 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, err
		}
		if len(data) == cap(data) {
			if cap(data) >= maxFrame {
				putBuffer(buf)
				return nil, nil, streaming.ErrObjectTooLarge
			}
			bigger := getBuffer(min(max(2*cap(data), defaultFrameBuffer), maxFrame))
			*bigger = append(*bigger, data...)
			putBuffer(buf)
			buf, data = bigger, *bigger
		}
		var m int
		m, err = w.body.Read(data[len(data):cap(data)])
		*buf = data[:len(data)+m]
	}
}

// keepRest keeps what follows an event on a JSON stream for the next
// event's reader, unless it is only white space.
func (w *streamWatch) keepRest(rest []byte) {
	for _, c := range rest {
		if !isJSONSpace(c) {
			buf := getBuffer(len(rest))
			*buf = append(*buf, rest...)
			w.rest = buf
			return
		}
	}
}

// jsonScanner finds where a JSON object or array ends, across reads.
type jsonScanner struct {
	start    int // of the value, -1 until found
	depth    int
	inString bool
	escaped  bool
}

// scan looks at b from the offset from on (what is before was scanned
// already) and returns the offset just past the value, or -1 if it has not
// ended in b.
func (s *jsonScanner) scan(b []byte, from int) (int, error) {
	for k := from; k < len(b); k++ {
		c := b[k]
		if s.start < 0 {
			if isJSONSpace(c) {
				continue
			}
			if c != '{' && c != '[' {
				return -1, fmt.Errorf("invalid character %q looking for the beginning of a watch event", c)
			}
			s.start = k
		}
		switch {
		case s.inString:
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
			}
		case c == '"':
			s.inString = true
		case c == '{' || c == '[':
			s.depth++
		case c == '}' || c == ']':
			s.depth--
			if s.depth == 0 {
				return k + 1, nil
			}
		}
	}
	return -1, nil
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Buffers of events being read, shared by every stream: a watch holds one
// only while it reads an event.
var framePool = sync.Pool{New: func() any {
	b := make([]byte, 0, defaultFrameBuffer)
	return &b
}}

const (
	defaultFrameBuffer = 8 << 10
	maxPooledBuffer    = 1 << 20 // larger ones, for the odd large object, are not kept
)

// getBuffer returns a buffer of capacity at least size, of length 0.
func getBuffer(size int) *[]byte {
	buf := framePool.Get().(*[]byte)
	if cap(*buf) < size {
		framePool.Put(buf)
		b := make([]byte, 0, size)
		buf = &b
	}
	*buf = (*buf)[:0]
	return buf
}

func putBuffer(buf *[]byte) {
	if buf == nil || cap(*buf) > maxPooledBuffer {
		return
	}
	framePool.Put(buf)
}
