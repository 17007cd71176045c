// Package runstate is what an agent keeps in its state directory
// (/run/vgpu-probe) so that other agents and its own next start know what
// it owns and what it changed:
//
//   - locks (flock on NAME.lock, holding the owner's pid): one owner per
//     hints directory and per mitigated process, so that two agents never
//     undo each other's slices or remove each other's pages. The kernel
//     drops a lock when its owner dies, however it dies;
//   - a journal of the slices an agent set (slices-PID.json), written
//     before each slice is set: after a crash (SIGKILL, OOM kill) the
//     next agent to start restores what the dead one left.
//
// /run is a tmpfs: a reboot, which resets every slice, clears it too.
package runstate
