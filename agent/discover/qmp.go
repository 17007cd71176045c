package discover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-probe/vgpu-probe/agent/libvirt"
)

// maxQMPReply bounds what is read from a QMP socket in one session.
const maxQMPReply = 1 << 20

// queryVCPUs asks QEMU's QMP socket (sock, as socketFor opened the
// path it names, path) for its vCPU threads (query-cpus-fast): the host thread id
// of each cpu-index. Nothing is sent unless the socket's server is
// process pid itself. QEMU serves one QMP client at a time on a socket;
// while another is connected the greeting does not come and this gives
// up at the deadline.
func queryVCPUs(sock *os.File, path string, pid int, timeout time.Duration) ([]libvirt.VCPU, error) {
	c, err := dialFD(sock, timeout)
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
	defer c.Close()
	if err := peerIs(c, pid); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", path, err)
	}
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

// dialFD connects to the unix socket whose O_PATH descriptor is sock,
// through /proc/self/fd: the kernel follows that link to the socket's
// inode, so the socket connected to is the one checked, whatever its
// path names by now.
func dialFD(sock *os.File, timeout time.Duration) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unix", "/proc/self/fd/"+strconv.Itoa(int(sock.Fd())), timeout)
	runtime.KeepAlive(sock)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// peerIs checks that the server end of c is process pid.
func peerIs(c *net.UnixConn, pid int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("served by process %d, not by the VM's process %d: not used", cred.Pid, pid)
	}
	return nil
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
