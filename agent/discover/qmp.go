package discover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt"
)

// maxQMPReply bounds what is read from a QMP socket in one session.
const maxQMPReply = 1 << 20

// queryVCPUs asks QEMU's QMP socket at path for its vCPU threads
// (query-cpus-fast): the host thread id of each cpu-index. QEMU serves one
// QMP client at a time on a socket; while another is connected the
// greeting does not come and this gives up at the deadline.
func queryVCPUs(path string, timeout time.Duration) ([]libvirt.VCPU, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	dec := json.NewDecoder(io.LimitReader(c, maxQMPReply))
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := dec.Decode(&greeting); err != nil || greeting.QMP == nil {
		return nil, fmt.Errorf("QMP %s: no greeting: %v", path, err)
	}
	if _, err := qmpCommand(c, dec, "qmp_capabilities"); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	reply, err := qmpCommand(c, dec, "query-cpus-fast")
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	v, err := libvirt.ParseQueryCPUsFast(string(reply))
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	return v, nil
}

// qmpCommand sends one command and returns its reply, skipping the
// asynchronous events QEMU may send in between.
func qmpCommand(w io.Writer, dec *json.Decoder, cmd string) (json.RawMessage, error) {
	if _, err := fmt.Fprintf(w, "{\"execute\":%q}\n", cmd); err != nil {
		return nil, err
	}
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		var msg struct {
			Event  *string          `json:"event"`
			Return *json.RawMessage `json:"return"`
			Error  *json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		if msg.Event != nil {
			continue
		}
		if msg.Error != nil {
			return nil, fmt.Errorf("%s: %s", cmd, *msg.Error)
		}
		if msg.Return == nil {
			return nil, errors.New(cmd + ": reply without return or error")
		}
		return raw, nil
	}
}
