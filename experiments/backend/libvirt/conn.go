package libvirt

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// DefaultURI is libvirtd's system instance.
const DefaultURI = "qemu:///system"

const defaultSocket = "/run/libvirt/libvirt-sock"

// ErrNoLibvirt means libvirtd cannot be reached.
var ErrNoLibvirt = errors.New("libvirtd not reachable")

// socketOf returns the local socket a URI names: qemu:///system,
// qemu+unix:///system?socket=PATH, or a socket path. (The same URIs the
// agent's --libvirt-uri takes.)
func socketOf(uri string) (string, error) {
	if uri == "" {
		uri = DefaultURI
	}
	if filepath.IsAbs(uri) {
		return filepath.Clean(uri), nil
	}
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "qemu" && u.Scheme != "qemu+unix") || u.Host != "" || u.Path != "/system" {
		return "", fmt.Errorf("libvirt URI %q: want qemu:///system, qemu+unix:///system?socket=PATH or a socket path", uri)
	}
	if s := u.Query().Get("socket"); s != "" {
		if !filepath.IsAbs(s) {
			return "", fmt.Errorf("libvirt URI %q: socket is not an absolute path", uri)
		}
		return filepath.Clean(s), nil
	}
	return defaultSocket, nil
}

// dial connects to libvirtd at uri within timeout, or says in one line
// what is missing.
func dial(uri string, timeout time.Duration) (*lv.Libvirt, error) {
	sock, err := socketOf(uri)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(sock); err != nil {
		return nil, fmt.Errorf("%w: no socket %s (install libvirt and start libvirtd, e.g. .ci/setup-libvirt.sh)", ErrNoLibvirt, sock)
	}
	l := lv.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(timeout)))
	done := make(chan error, 1)
	go func() { done <- l.ConnectToURI(lv.QEMUSystem) }()
	select {
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoLibvirt, sock, err)
		}
		return l, nil
	case <-time.After(timeout):
		// The goroutine ends when the dialer's own timeout closes the
		// connection.
		return nil, fmt.Errorf("%w: %s does not answer within %s", ErrNoLibvirt, sock, timeout)
	}
}

func isNoDomain(err error) bool {
	var e lv.Error
	if errors.As(err, &e) {
		return e.Code == uint32(lv.ErrNoDomain) || e.Code == uint32(lv.ErrOperationInvalid)
	}
	return false
}
