package server

import "sync"

// memberOrder is the members' records in the order of their names, for
// Statuses. The fan-out client's table keeps the names sorted, in a list
// it shares until a name comes or goes; the records are looked up once per
// such list, not on every call. A record routes its name while its member
// is desired and removes the route before it retires, so a name's record
// can change only along with the list: the records looked up for a list
// are its records for as long as the table serves that list.
type memberOrder struct {
	mu      sync.Mutex
	names   []string // the list the records were looked up for
	records []*cluster
}

// of returns the records of names (the table's sorted names), in their
// order; a name without a record has nil. Callers must not change the
// slice.
func (o *memberOrder) of(names []string, reg *registry) []*cluster {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(names) != len(o.names) || len(names) > 0 && &names[0] != &o.names[0] {
		records := make([]*cluster, len(names))
		for i, name := range names {
			records[i] = reg.get(name)
		}
		o.names, o.records = names, records
	}
	return o.records
}
