package hints

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// The /dev/shm-only warning is for another directory only, /dev/shm by
// any spelling says nothing.
func TestWarnLibvirtDir(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for _, dir := range []string{"/dev/shm", "/dev/shm/", "/dev//shm"} {
		if WarnLibvirtDir(log, dir) {
			t.Errorf("%s: warned", dir)
		}
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		link := t.TempDir() + "/shm"
		if err := os.Symlink("/dev/shm", link); err == nil && WarnLibvirtDir(log, link) {
			t.Errorf("%s (a link to /dev/shm): warned", link)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("logged %q", buf.String())
	}
	if !WarnLibvirtDir(log, t.TempDir()) || !strings.Contains(buf.String(), "/dev/shm only") {
		t.Errorf("another directory: %q", buf.String())
	}
}
