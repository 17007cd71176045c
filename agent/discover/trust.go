package discover

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Trust says which processes named like a hypervisor are VMs the agent
// acts for. The agent runs as root: a VM gets a hint page, a Prometheus
// label and, with --mitigate, a scheduling privilege, and its QMP socket
// is dialled. A process is trusted by who runs it and what it runs,
// never by its name, its thread names or its command line, which any
// user sets:
//
//   - every uid of the process (real, effective, saved, file system) is
//     one of UIDs, or of PodUIDs for a process in a Kubernetes pod's
//     cgroup (which only the kubelet, as root, places processes in);
//   - its executable, where the agent may read /proc/PID/exe, is a file
//     owned by root and writable by no one else, in a directory owned by
//     root and writable by no one else. Reading the link of another
//     user's process needs CAP_SYS_PTRACE, which the unit does not have:
//     there the owner alone decides.
type Trust struct {
	UIDs    []uint32
	PodUIDs []uint32
}

// kubevirtQEMUUID is the qemu user KubeVirt's virt-launcher runs a
// non-root VM's QEMU as.
const kubevirtQEMUUID = 107

// HypervisorUsers are the users trusted by default beside root: the users
// distributions run QEMU as (Debian's libvirt-qemu, Fedora's and RHEL's
// qemu). A name this host does not know is skipped.
var HypervisorUsers = []string{"root", "libvirt-qemu", "qemu"}

// DefaultTrust trusts root and HypervisorUsers, and KubeVirt's qemu user
// inside a pod.
func DefaultTrust() Trust {
	t, _ := ParseTrust(strings.Join(HypervisorUsers, ","), true)
	t.PodUIDs = []uint32{kubevirtQEMUUID}
	return t
}

// ParseTrust reads a comma-separated list of user names and numeric uids
// (--trust-users). With skipUnknown a name this host does not know is
// left out; otherwise it is an error.
func ParseTrust(list string, skipUnknown bool) (Trust, error) {
	var t Trust
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if n, err := strconv.ParseUint(f, 10, 32); err == nil {
			t.UIDs = append(t.UIDs, uint32(n))
			continue
		}
		u, err := user.Lookup(f)
		if err != nil {
			if skipUnknown {
				continue
			}
			return Trust{}, fmt.Errorf("--trust-users: no user %q on this host", f)
		}
		n, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return Trust{}, fmt.Errorf("--trust-users: user %q has uid %q", f, u.Uid)
		}
		t.UIDs = append(t.UIDs, uint32(n))
	}
	if len(t.UIDs) == 0 {
		return Trust{}, errors.New("--trust-users: no user given")
	}
	slices.Sort(t.UIDs)
	t.UIDs = slices.Compact(t.UIDs)
	return t, nil
}

// checkOwner returns nil when every uid of a process (its /proc
// directory) is trusted, else why not. inPod: the process is in a
// Kubernetes pod's cgroup. A process may change its uids (QEMU's -runas):
// this is asked at every scan, the executable (checkExecutable) once.
func (t Trust) checkOwner(dir string, inPod bool) error {
	id, err := readIDs(dir)
	if err != nil {
		return err
	}
	for _, u := range id.uids {
		if !slices.Contains(t.UIDs, u) && !(inPod && slices.Contains(t.PodUIDs, u)) {
			return fmt.Errorf("run by uid %d, not a user trusted to run hypervisors", u)
		}
	}
	return nil
}

// checkExecutable checks the process's executable and its directory (see
// Trust). The file is stat'ed through the exe link, which is the mapped
// file itself whatever its path now holds; the directory through the
// process's own root, so that a container's is its image's.
func checkExecutable(dir string) error {
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if errors.Is(err, os.ErrPermission) {
		return nil // another user's process without CAP_SYS_PTRACE: the owner decides
	}
	if err != nil {
		return err
	}
	fi, err := os.Stat(filepath.Join(dir, "exe"))
	if err != nil {
		return err
	}
	if err := rootOnly(fi); err != nil {
		return fmt.Errorf("executable %q %w", exe, err)
	}
	parent := filepath.Dir(strings.TrimSuffix(exe, " (deleted)"))
	if !filepath.IsAbs(parent) {
		return fmt.Errorf("executable %q: not an absolute path", exe)
	}
	fi, err = os.Stat(filepath.Join(dir, "root") + parent)
	if err != nil {
		return fmt.Errorf("directory of executable %q: %w", exe, err)
	}
	if err := rootOnly(fi); err != nil {
		return fmt.Errorf("directory of executable %q %w", exe, err)
	}
	return nil
}

// rootOnly: owned by root, writable by no one else.
func rootOnly(fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("has no owner")
	}
	if st.Uid != 0 {
		return fmt.Errorf("is owned by uid %d, not root", st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("is writable by group or others (%v)", fi.Mode().Perm())
	}
	return nil
}
