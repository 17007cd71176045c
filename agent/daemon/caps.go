package daemon

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// CapSet is a set of Linux capabilities: bit n is capability n.
type CapSet uint64

// capability is one Linux capability, by number and name.
type capability struct {
	bit  uint
	name string
}

// The capabilities the agent's features need (docs/agent.md, "Privileges
// and hardening"); the systemd unit's CapabilityBoundingSet lists them.
var (
	capBPF         = capability{unix.CAP_BPF, "CAP_BPF"}
	capPerfmon     = capability{unix.CAP_PERFMON, "CAP_PERFMON"}
	capSysAdmin    = capability{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}
	capChown       = capability{unix.CAP_CHOWN, "CAP_CHOWN"}
	capDACOverride = capability{unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"}
	capFowner      = capability{unix.CAP_FOWNER, "CAP_FOWNER"}
	capSysNice     = capability{unix.CAP_SYS_NICE, "CAP_SYS_NICE"}
)

// has reports whether c is in s.
func (s CapSet) has(c capability) bool { return s&(1<<c.bit) != 0 }

// effectiveCaps returns this process's effective capability set.
func effectiveCaps() (CapSet, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: capabilities 0-31, then 32-63
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("reading this process's capabilities (capget): %w", err)
	}
	return CapSet(data[0].Effective) | CapSet(data[1].Effective)<<32, nil
}

// privilege is what one feature needs: every capability of need, or, on
// a kernel that predates them, every capability of instead.
type privilege struct {
	feature string
	need    []capability
	instead []capability
	why     string
}

// privileges lists what the requested features need.
func (c *Config) privileges() []privilege {
	ps := []privilege{{feature: "loading the eBPF programs", need: []capability{capBPF, capPerfmon},
		instead: []capability{capSysAdmin}, why: "tracing programs on the scheduler's tracepoints"}}
	if c.Hints != "" {
		ps = append(ps, privilege{feature: "--hints", need: []capability{capChown},
			why: "each page belongs to its target's user"})
		if c.LibvirtURI != "" || c.Discover {
			feature := "--hints with --libvirt-uri"
			if c.LibvirtURI == "" {
				feature = "--hints with --discover"
			}
			ps = append(ps, privilege{feature: feature, need: []capability{capDACOverride, capFowner},
				why: "a VM's page is the file QEMU created, owned by QEMU's user: the agent opens it read-write and makes it mode 0600"})
		}
	}
	if c.Mitigate != "" {
		ps = append(ps, privilege{feature: "--mitigate", need: []capability{capSysNice},
			why: "it sets the slice of threads of other users"})
	}
	return ps
}

// checkPrivileges refuses, with one line naming the first capability
// missing, a feature that could not work with the capabilities in have.
func checkPrivileges(have CapSet, ps []privilege) error {
	for _, p := range ps {
		missing := missingFrom(have, p.need)
		if len(missing) == 0 || (len(p.instead) > 0 && len(missingFrom(have, p.instead)) == 0) {
			continue
		}
		alt := ""
		if len(p.instead) > 0 {
			alt = fmt.Sprintf(", or %s on kernels before 5.8", names(p.instead))
		}
		return requestErrorf("%s needs %s (not in this process's effective set%s): %s", p.feature, names(missing), alt, p.why)
	}
	return nil
}

func missingFrom(have CapSet, need []capability) []capability {
	var out []capability
	for _, c := range need {
		if !have.has(c) {
			out = append(out, c)
		}
	}
	return out
}

func names(cs []capability) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.name
	}
	return strings.Join(s, " and ")
}

// checkCaps refuses at start a requested feature that could not work
// with this process's effective capabilities (under the systemd unit,
// its CapabilityBoundingSet), rather than failing target by target.
func (c *Config) checkCaps() error {
	get := c.Capabilities
	if get == nil {
		get = effectiveCaps
	}
	have, err := get()
	if err != nil {
		return err
	}
	return checkPrivileges(have, c.privileges())
}
