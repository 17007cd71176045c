package discover

import (
	"strings"

	"github.com/vgpu-probe/vgpu-probe/cgroups"
)

// podUID returns the UID of the Kubernetes pod whose cgroup holds a
// process, from its /proc/PID/cgroup lines: the cgroupfs driver's
// .../kubepods/[burstable|besteffort/]pod<uid>/<container>, the systemd
// driver's .../kubepods.slice/...-pod<uid_with_underscores>.slice/<scope>.
func podUID(ms []cgroups.Membership) (string, bool) {
	for _, m := range ms {
		parts := strings.Split(m.Path, "/")
		inKube := false
		for _, p := range parts {
			if p == "kubepods" || p == "kubepods.slice" {
				inKube = true
				continue
			}
			if !inKube {
				continue
			}
			p = strings.TrimSuffix(p, ".slice")
			if i := strings.LastIndex(p, "-pod"); i >= 0 {
				p = p[i+1:]
			}
			if uid, ok := strings.CutPrefix(p, "pod"); ok && validUID(uid) {
				return strings.ReplaceAll(uid, "_", "-"), true
			}
		}
	}
	return "", false
}

func validUID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// kubevirtName splits the domain name virt-launcher gives QEMU,
// NAMESPACE_VMI, into the VMI's namespace and name. Neither a namespace
// (a DNS label) nor a VMI name (a DNS subdomain) may hold '_', so the
// first '_' is the separator.
func kubevirtName(qemuName string) (namespace, vmi string, ok bool) {
	ns, name, ok := strings.Cut(qemuName, "_")
	if !ok || ns == "" || name == "" || strings.Contains(name, "_") {
		return "", "", false
	}
	return ns, name, true
}

// inPodCgroup reports whether a process is in a Kubernetes pod's cgroup
// under the hierarchy's top-level kubepods: only the kubelet (root) puts
// processes there, whereas a user may name a cgroup of a delegated
// subtree (systemd's user@.service) anything, "kubepods" included.
func inPodCgroup(ms []cgroups.Membership) bool {
	for _, m := range ms {
		if !strings.HasPrefix(m.Path, "/kubepods/") && !strings.HasPrefix(m.Path, "/kubepods.slice/") {
			continue
		}
		if _, ok := podUID([]cgroups.Membership{m}); ok {
			return true
		}
	}
	return false
}
