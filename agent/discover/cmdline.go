package discover

import (
	"path/filepath"
	"strings"
)

// Hypervisor is the kind of VM process.
type Hypervisor string

const (
	QEMU            Hypervisor = "qemu"
	CloudHypervisor Hypervisor = "cloud-hypervisor"
	Firecracker     Hypervisor = "firecracker"
	Crosvm          Hypervisor = "crosvm"
)

// hypervisorOf classifies an executable by its file name: the binary, as
// /proc/PID/exe resolves it (Proxmox's /usr/bin/kvm is a link to
// qemu-system-x86_64), or the process's comm (15 bytes at most) where
// the link cannot be read. Release builds carry suffixes
// (firecracker-v1.7.0-x86_64, cloud-hypervisor-static).
func hypervisorOf(name string) (Hypervisor, bool) {
	name = filepath.Base(strings.TrimSuffix(name, " (deleted)"))
	switch {
	case strings.HasPrefix(name, "qemu-system-"), name == "qemu-kvm", name == "kvm":
		return QEMU, true
	case strings.HasPrefix(name, "cloud-hyperviso"): // comm truncates it
		return CloudHypervisor, true
	case strings.HasPrefix(name, "firecracker"):
		return Firecracker, true
	case strings.HasPrefix(name, "crosvm"):
		return Crosvm, true
	}
	return "", false
}

// identity is what a VM's command line says about it.
type identity struct {
	// name is the hypervisor's own name for the VM; "" when it has none.
	name string
	// qmp is the path of a QMP (control mode monitor) socket QEMU listens
	// on; "" when there is none or it is a passed file descriptor.
	qmp string
	// libvirt: QEMU's monitor is libvirt's (chardev "charmonitor" on a
	// descriptor libvirt passed): a libvirtd started it, the host's or
	// one in a container (KubeVirt's virt-launcher).
	libvirt bool
}

// splitCmdline splits /proc/PID/cmdline (NUL-terminated arguments).
func splitCmdline(b []byte) []string {
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// parseIdentity reads the identity flags of one hypervisor's arguments
// (args[0] is the program). What it returns is bounded (maxIdentity) and
// copied: the arguments are substrings of the whole command line, which
// a value kept for the life of the process must not hold.
func parseIdentity(h Hypervisor, args []string) identity {
	id := identityOf(h, args)
	id.name = keep(id.name, maxIdentity)
	if len(id.qmp) > maxIdentity {
		id.qmp = "" // cut, it would be another path
	}
	id.qmp = strings.Clone(id.qmp)
	return id
}

// identityOf is parseIdentity unbounded.
func identityOf(h Hypervisor, args []string) identity {
	switch h {
	case QEMU:
		return qemuIdentity(args)
	case Firecracker:
		return identity{name: flagValue(args, "--id")}
	case CloudHypervisor:
		return identity{name: socketName(cloudHypervisorSocket(flagValue(args, "--api-socket")))}
	case Crosvm:
		s := flagValue(args, "--socket")
		if s == "" {
			s = flagValue(args, "-s")
		}
		return identity{name: socketName(s)}
	}
	return identity{}
}

// flagValue is the value of a long option given as "--flag VALUE" or
// "--flag=VALUE" (clap's and Firecracker's forms); the last one wins.
func flagValue(args []string, flag string) string {
	v := ""
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if a == flag && i+1 < len(args) {
			v = args[i+1]
			i++
		} else if rest, ok := strings.CutPrefix(a, flag+"="); ok {
			v = rest
		}
	}
	return v
}

// cloudHypervisorSocket is the path of Cloud Hypervisor's --api-socket,
// given as a path or as "path=PATH" ("fd=N" has none).
func cloudHypervisorSocket(v string) string {
	if !strings.Contains(v, "=") {
		return v
	}
	for _, kv := range splitOpts(v) {
		if p, ok := strings.CutPrefix(kv, "path="); ok {
			return p
		}
	}
	return ""
}

// genericSocket are socket file names that say nothing about the VM
// (Kata Containers puts clh-api.sock in a directory named for the
// sandbox): the directory names it instead.
var genericSocket = map[string]bool{"api": true, "clh-api": true, "ch": true, "control": true, "crosvm": true, "firecracker": true, "cloud-hypervisor": true}

// socketName names a VM after its API or control socket: the file name
// without .sock/.socket, or its directory's name where the file name is a
// generic one.
func socketName(path string) string {
	path = strings.TrimRight(path, "/")
	if path == "" {
		return ""
	}
	base := filepath.Base(path)
	for _, ext := range []string{".sock", ".socket"} {
		base = strings.TrimSuffix(base, ext)
	}
	if genericSocket[base] || base == "" {
		if dir := filepath.Base(filepath.Dir(path)); dir != "/" && dir != "." {
			return dir
		}
	}
	return base
}

// qemuIdentity reads QEMU's -name and QMP monitor from its arguments.
// Options take "-opt VALUE" or "--opt VALUE"; a value is QEMU's option
// syntax: comma-separated key=value pairs, ",," for a literal comma, the
// first pair's key implied where it has no "=" (guest for -name, chardev
// for -mon).
func qemuIdentity(args []string) identity {
	var id identity
	chardevs := map[string]string{} // id -> socket path
	var monitors []string           // chardev ids of control-mode monitors
	for i := 1; i+1 < len(args); i++ {
		opt := args[i]
		if !strings.HasPrefix(opt, "-") {
			continue
		}
		opt = "-" + strings.TrimLeft(opt, "-")
		val := args[i+1]
		switch opt {
		case "-name":
			i++
			if g := optValue(val, "guest"); g != "" {
				id.name = g
			}
		case "-qmp":
			i++
			if p, ok := strings.CutPrefix(val, "unix:"); ok {
				if path := firstOpt(p); path != "" {
					id.qmp = path
				}
			}
		case "-chardev":
			i++
			kv := splitOpts(val)
			if len(kv) > 0 && kv[0] == "socket" {
				cid, path := optValue(val, "id"), optValue(val, "path")
				if cid != "" && path != "" {
					chardevs[cid] = path
				}
				if cid == "charmonitor" && optValue(val, "fd") != "" {
					id.libvirt = true
				}
			}
		case "-mon":
			i++
			if optValue(val, "mode") == "control" {
				if c := optValue(val, "chardev"); c != "" {
					monitors = append(monitors, c)
				}
			}
		}
	}
	if id.qmp == "" {
		for _, m := range monitors {
			if p, ok := chardevs[m]; ok {
				id.qmp = p
				break
			}
		}
	}
	return id
}

// impliedKey is the key a QEMU option's first value has when it is
// given without one.
var impliedKey = map[string]string{"guest": "guest", "chardev": "chardev"}

// optValue returns key's value in a QEMU option string; the first item
// without "=" is the implied key's value (guest for -name, chardev for
// -mon). The last occurrence wins, as in QEMU.
func optValue(s, key string) string {
	v := ""
	for i, kv := range splitOpts(s) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			if i == 0 && impliedKey[key] != "" {
				v = kv
			}
			continue
		}
		if k == key {
			v = val
		}
	}
	return v
}

// firstOpt is the first item of a QEMU option string (a path with ",,"
// for commas, then ",server=on,wait=off" and the like).
func firstOpt(s string) string {
	kv := splitOpts(s)
	if len(kv) == 0 {
		return ""
	}
	return kv[0]
}

// splitOpts splits a QEMU option string at single commas; ",," is a
// literal comma.
func splitOpts(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != ',' {
			cur.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == ',' {
			cur.WriteByte(',')
			i++
			continue
		}
		out = append(out, cur.String())
		cur.Reset()
	}
	return append(out, cur.String())
}
