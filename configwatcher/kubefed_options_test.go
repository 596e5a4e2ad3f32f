package configwatcher

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

func TestKubeFedOptions(t *testing.T) {
	l := funcr.New(func(string, string) {}, funcr.Options{})
	o, err := newKubeFedOptions([]KubeFedOption{
		WithKubeFedNamespace("fed"), RequireReady(), WithKubeFedErrorDelay(time.Minute), WithLogger(l), nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "fed" || !o.RequireReady || o.ErrorDelay != time.Minute || o.Logger.GetSink() != l.GetSink() {
		t.Fatalf("options not applied: %+v", o)
	}
	o, err = newKubeFedOptions([]KubeFedOption{WithKubeFedLogger(l)})
	if err != nil || o.Logger.GetSink() != l.GetSink() {
		t.Fatalf("WithKubeFedLogger: %v, %+v", err, o)
	}

	o, err = newKubeFedOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != DefaultKubeFedNamespace || o.ErrorDelay != DefaultKubeFedErrorDelay || o.Logger.GetSink() != logr.Discard().GetSink() {
		t.Fatalf("defaults not applied: %+v", o)
	}
}
