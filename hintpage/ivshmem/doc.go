// Package ivshmem exposes, inside a VM, the hint page the host agent
// publishes through an ivshmem-plain PCI device (1af4:1110, the device a
// libvirt <shmem> element gives the guest): it finds the device, enables
// its memory decoding and bind-mounts its BAR2 read-only at a path local
// processes read with HYBRIDSYNC_HINTS (docs/hints.md, "In the guest").
//
// Errors about a device the caller named wrap ErrBadAddress,
// ErrNoSuchDevice or ErrNotIvshmem; ErrNoDevice means the guest has none.
package ivshmem
