package libvirt

import (
	"errors"
	"fmt"
	"os"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	agentlibvirt "github.com/vgpu-probe/vgpu-probe/agent/libvirt"
)

// DefaultURI is libvirtd's system instance, as the agent's --libvirt-uri
// defaults to.
const DefaultURI = agentlibvirt.DefaultURI

// ErrNoLibvirt means libvirtd cannot be reached.
var ErrNoLibvirt = errors.New("libvirtd not reachable")

// dial connects to libvirtd at uri within timeout, or says in one line
// what is missing.
func dial(uri string, timeout time.Duration) (*lv.Libvirt, error) {
	// The agent's parser, so that both take the same URIs.
	sock, err := agentlibvirt.Socket(uri)
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
