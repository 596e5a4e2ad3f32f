package syncinformer

import (
	"slices"
	"testing"
)

// TestKindsOnChange: the function is called after each change, with the
// set's lock released (it reads the set), and not for a change that
// changes nothing; nil stops the calls.
func TestKindsOnChange(t *testing.T) {
	k := NewKinds()
	var seen [][]string
	k.OnChange(func() { seen = append(seen, k.List()) })
	k.Forbid("*v1.Secret")
	k.Forbid("*v1.Secret")
	k.Forbid("*v1.ConfigMap")
	k.Allow("*v1.Pod")
	k.Allow("*v1.Secret")
	want := [][]string{{"*v1.Secret"}, {"*v1.ConfigMap", "*v1.Secret"}, {"*v1.ConfigMap"}}
	if !slices.EqualFunc(seen, want, slices.Equal) {
		t.Errorf("seen %q, want %q", seen, want)
	}
	k.OnChange(nil)
	k.Allow("*v1.ConfigMap")
	if len(seen) != len(want) {
		t.Errorf("called after OnChange(nil): %q", seen)
	}
	var none *Kinds
	none.OnChange(func() { t.Error("a nil set changed") })
	none.Forbid("*v1.Secret")
}
