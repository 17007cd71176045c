// Package input reads the local files vgpu-probe's readers are given
// (`vgpu-probe report`'s inputs, the results file a resumed run reads),
// decodes the versioned JSON formats among them (Format), and checks the
// numbers decoded from them.
//
// Reading is bounded and can be interrupted: only regular files (and a
// stream the caller hands over, such as stdin) are read, at most MaxBytes
// of them, and a cancelled context returns at once even while a read is
// blocked. A named pipe, a device or a directory is refused before
// anything is read from it: /dev/zero would otherwise grow without bound,
// and a FIFO with no writer would block forever.
package input
