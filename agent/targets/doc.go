// Package targets names what the agent watches: a target is a VM (libvirt
// domain), a process or a cgroup, with the thread ids to measure and, where
// known, the vCPU index of each thread and the CPU bandwidth quota. It also
// implements the plain sources that need no hypervisor: a process id
// (all its threads, re-scanned) and a cgroup directory (v1 or v2).
//
// ErrNoProcess and ErrNoCgroup report targets that do not exist when the
// source is created; later disappearance is a Removed event instead.
package targets
