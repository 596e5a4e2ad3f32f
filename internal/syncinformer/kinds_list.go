package syncinformer

import (
	"maps"
	"slices"
)

// List returns the kinds in the set, sorted; nil when it is empty. It
// takes only the set's leaf lock.
func (f *Kinds) List() []string {
	if f == nil || !f.nonEmpty.Load() {
		return nil
	}
	f.mu.Lock()
	kinds := slices.Collect(maps.Keys(f.set))
	f.mu.Unlock()
	if len(kinds) == 0 {
		return nil
	}
	slices.Sort(kinds)
	return kinds
}
