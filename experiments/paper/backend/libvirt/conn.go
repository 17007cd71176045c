package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// qemuOwner is the user and group libvirt runs QEMU as for domains of
// domType: the base label of its DAC security model, from the host's
// capabilities ("+64055:+64055"); root where there is no DAC model
// (QEMU runs as root).
func qemuOwner(l *lv.Libvirt, domType string) (uid, gid int, err error) {
	caps, err := l.ConnectGetCapabilities()
	if err != nil {
		return 0, 0, fmt.Errorf("libvirt capabilities: %w", err)
	}
	return dacLabel(caps, domType)
}

// dacLabel reads the DAC base label of domType (or the first) from
// libvirt's capabilities XML.
func dacLabel(caps, domType string) (uid, gid int, err error) {
	var c struct {
		Secmodels []struct {
			Model  string `xml:"model"`
			Labels []struct {
				Type  string `xml:"type,attr"`
				Value string `xml:",chardata"`
			} `xml:"baselabel"`
		} `xml:"host>secmodel"`
	}
	if err := xml.Unmarshal([]byte(caps), &c); err != nil {
		return 0, 0, fmt.Errorf("libvirt capabilities: %w", err)
	}
	for _, m := range c.Secmodels {
		if m.Model != "dac" || len(m.Labels) == 0 {
			continue
		}
		label := m.Labels[0].Value
		for _, b := range m.Labels {
			if b.Type == domType {
				label = b.Value
			}
		}
		u, g, ok := strings.Cut(strings.TrimSpace(label), ":")
		uid, err1 := strconv.Atoi(strings.TrimPrefix(u, "+"))
		gid, err2 := strconv.Atoi(strings.TrimPrefix(g, "+"))
		if !ok || err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("libvirt's DAC label %q: want +UID:+GID", label)
		}
		return uid, gid, nil
	}
	return 0, 0, nil
}
