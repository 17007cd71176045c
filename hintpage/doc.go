// Package hintpage is the layout of the remaining-time-slice hint page
// that the host agent publishes for a VM (mapped into the guest through
// ivshmem) or for a local process, and a writer and a lock-free reader for
// it. docs/hints.md describes the format byte by byte.
//
// The reader treats the page as untrusted input: another tenant, an older
// agent or a truncated file must make it return an error (ErrMagic,
// ErrVersion, ErrSize, ErrTorn, ErrStale, ErrAbsurd), never panic or hand
// back a value it did not validate.
package hintpage
