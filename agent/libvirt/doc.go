// Package libvirt discovers the VMs on a host through libvirtd: each running
// domain, its vCPU thread ids, their pinning and the domain's <cputune>
// bandwidth, and follows domains as they start, stop and restart, surviving
// libvirtd restarts.
//
// It speaks libvirt's RPC protocol directly (github.com/digitalocean/go-libvirt),
// so no libvirt C library is needed. Sources, per domain:
//   - vCPU thread ids: QEMU monitor passthrough, {"execute":"query-cpus-fast"}
//     ("thread-id" per "cpu-index"). libvirt marks a domain it passes a monitor
//     command to as tainted ("custom-monitor" in its log); that is cosmetic.
//   - pinning: virDomainGetVcpuPinInfo (live), falling back to <vcpupin> in the
//     live XML. A vCPU allowed on every online host CPU counts as unpinned.
//   - period/quota: <cputune><period>/<quota> in the live XML, which libvirt
//     also updates on a live `virsh schedinfo --live --set`.
//
// Watcher.Run emits Added for every running domain, then follows lifecycle
// events. When the connection to libvirtd drops it dials again with backoff,
// lists the domains again and emits Removed for those gone or restarted and
// Added for new ones. Added is also sent again, for a domain already added,
// when its pinning or bandwidth changed live (found by listing again every
// DefaultRefresh: go-libvirt drops libvirt's "tunable" events, it does
// not decode their typed parameters): consumers treat Added as add-or-replace,
// keyed by Domain.UUID.
//
// Supported URIs: qemu:///system (the socket /run/libvirt/libvirt-sock),
// qemu:///system?socket=PATH, qemu+unix:///system?socket=PATH, or the
// absolute path of a libvirtd socket. Remote transports (ssh, tls) are not
// supported: the thread ids only mean something on the host the agent runs on.
package libvirt
