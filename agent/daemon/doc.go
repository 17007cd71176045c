// Package daemon runs the host agent: it checks at start that the
// process may do what was asked (root, capabilities, the kernel's
// per-thread counters), builds the discovery sources (pids, cgroups,
// libvirt domains), starts the agent's parts (agent/assembly: --mitigate's
// slices, --hints' pages, the eBPF programs, the monitor) and feeds them
// the sources' changes, and serves /metrics and the JSON API, or measures
// once and prints a snapshot.
//
// Errors caused by what was asked rather than by the work (a target that
// does not exist, a libvirtd that does not answer, a hints directory the
// agent cannot use, a capability it lacks) wrap ErrRequest: the command
// reports them as bad input.
package daemon
