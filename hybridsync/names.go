package hybridsync

import (
	"hash/fnv"
	"sync"
)

// Names gives kernels stable ids by name (hs_kernel) and names back for the
// stats. Registration takes a lock: it happens once per kernel, not per call.
type Names struct {
	mu    sync.RWMutex
	ids   map[string]KernelID
	names map[KernelID]string
}

// ID returns the id of the kernel called name, registering it on first use.
// Ids derive from a hash of the name, so one name gets one id in every
// process of a run; an id never collides with another name in the same
// process (a clash moves to the next free id).
func (n *Names) ID(name string) KernelID {
	n.mu.RLock()
	id, ok := n.ids[name]
	n.mu.RUnlock()
	if ok {
		return id
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[name]; ok {
		return id
	}
	if n.ids == nil {
		n.ids, n.names = map[string]KernelID{}, map[KernelID]string{}
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	id = KernelID(h.Sum64() | 1)
	for _, taken := n.names[id]; taken || id == 0; _, taken = n.names[id] {
		id++
	}
	n.ids[name], n.names[id] = id, name
	return id
}

// Name returns the name registered for id, or "".
func (n *Names) Name(id KernelID) string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.names[id]
}
