package signal

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/hintpage"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/clock"
)

// TestLiveArrayFallback: without a usable live array (no socket, one that
// refuses, garbage, a descriptor that is not a BPF map) the reader uses
// the page's own live blocks, as before.
func TestLiveArrayFallback(t *testing.T) {
	tid := unix.Gettid()
	for _, tc := range []struct {
		name  string
		serve func(c *net.UnixConn)
	}{
		{"absent", nil},
		{"refuses", func(c *net.UnixConn) {}},
		{"garbage", func(c *net.UnixConn) { c.Write([]byte("not a message at all, not at all")) }},
		{"no fd", func(c *net.UnixConn) { c.Write(hintpage.LiveMsg{Slots: 63}.Encode()) }},
		{"not a map", func(c *net.UnixConn) {
			fd, _ := unix.MemfdCreate("x", 0)
			unix.Ftruncate(fd, 4096)
			c.WriteMsgUnix(hintpage.LiveMsg{Slots: 63}.Encode(), unix.UnixRights(fd), nil)
			unix.Close(fd)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "page")
			// A slice far longer than this test takes, on a loaded
			// machine too: a remaining time of 0 then means the page
			// was not read.
			const slice = 1_000_000_000
			w, err := hintpage.Create(path, 63, 0, os.Getuid(), os.Getgid())
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			now := uint64(clock.Now())
			w.Publish(0, &hintpage.Slot{TID: uint32(tid), PublishNs: now, State: hintpage.StateRunning, SwitchInNs: now - 1000,
				Contention: hintpage.ContShared, SliceNs: slice})
			if tc.serve != nil {
				ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path + hintpage.SockSuffix, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				go func() {
					for {
						c, err := ln.AcceptUnix()
						if err != nil {
							return
						}
						tc.serve(c)
						c.Close()
					}
				}()
			}
			h := NewHintSource(path, nil, nil)
			if h.LiveArray() {
				t.Fatal("a live array from a server that gave none")
			}
			var s hintpage.Slot
			live, ok := h.ReadSlot(tid, clock.Now(), &s)
			if !ok || live || s.SwitchInNs != now-1000 {
				t.Fatalf("read ok %v live %v: %+v", ok, live, s)
			}
			if r := h.Remaining(tid, clock.Now()); r <= 0 || r > slice {
				t.Fatalf("remaining %d from the page's live block", r)
			}
		})
	}
}
