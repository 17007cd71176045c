package libvirt

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	lv "github.com/digitalocean/go-libvirt"

	"github.com/vgpu-probe/vgpu-probe/agent/procstat"
)

// VCPU is one virtual CPU of a domain and the host thread that runs it.
type VCPU struct {
	Index int   // QEMU cpu-index, 0-based
	TID   int   // host thread id
	CPUs  []int // host CPUs it is pinned to; empty = any CPU
}

// Domain is a running libvirt domain as the agent needs it.
type Domain struct {
	Name  string
	UUID  string // canonical 8-4-4-4-12 form; the key for Added/Removed
	VCPUs []VCPU // sorted by Index
	// PeriodUS and QuotaUS are the <cputune> CFS bandwidth of each vCPU, in
	// microseconds; 0 = unset (quota -1, "unlimited", is reported as 0).
	PeriodUS, QuotaUS int64

	// ID is libvirt's id for this run of the domain; it changes on every
	// start, so a restarted domain is told apart from the one before.
	ID int
	// PID is the QEMU process (the thread group of the vCPU threads), read
	// from /proc; 0 if it could not be read.
	PID int
}

// sameRun reports whether a and b are the same run of a domain (not a
// restart): same libvirt id and the same vCPU threads.
func sameRun(a, b Domain) bool {
	if a.ID != b.ID || len(a.VCPUs) != len(b.VCPUs) {
		return false
	}
	for i := range a.VCPUs {
		if a.VCPUs[i].Index != b.VCPUs[i].Index || a.VCPUs[i].TID != b.VCPUs[i].TID {
			return false
		}
	}
	return true
}

// equal reports whether a and b describe the domain identically.
func equal(a, b Domain) bool {
	if !sameRun(a, b) || a.Name != b.Name || a.PeriodUS != b.PeriodUS || a.QuotaUS != b.QuotaUS || a.PID != b.PID {
		return false
	}
	for i := range a.VCPUs {
		if !slices.Equal(a.VCPUs[i].CPUs, b.VCPUs[i].CPUs) {
			return false
		}
	}
	return true
}

func (d Domain) clone() Domain {
	d.VCPUs = slices.Clone(d.VCPUs)
	for i := range d.VCPUs {
		d.VCPUs[i].CPUs = slices.Clone(d.VCPUs[i].CPUs)
	}
	return d
}

// domainXML is the part of the live domain XML we read.
type domainXML struct {
	Type    string `xml:"type,attr"`
	Name    string `xml:"name"`
	UUID    string `xml:"uuid"`
	CPUTune struct {
		Period  string `xml:"period"`
		Quota   string `xml:"quota"`
		VCPUPin []struct {
			VCPU   string `xml:"vcpu,attr"`
			CPUSet string `xml:"cpuset,attr"`
		} `xml:"vcpupin"`
	} `xml:"cputune"`
}

// tuning is what the XML says about bandwidth and pinning.
type tuning struct {
	name, uuid        string
	periodUS, quotaUS int64
	pins              map[int][]int // vCPU index -> cpuset from <vcpupin>
}

func parseDomainXML(s string) (tuning, error) {
	var x domainXML
	if err := xml.Unmarshal([]byte(s), &x); err != nil {
		return tuning{}, fmt.Errorf("parse domain xml: %w", err)
	}
	t := tuning{name: x.Name, uuid: x.UUID, pins: map[int][]int{}}
	var err error
	if t.periodUS, err = parseMicros(x.CPUTune.Period); err != nil {
		return tuning{}, fmt.Errorf("parse domain xml: cputune period: %w", err)
	}
	if t.quotaUS, err = parseMicros(x.CPUTune.Quota); err != nil {
		return tuning{}, fmt.Errorf("parse domain xml: cputune quota: %w", err)
	}
	for _, p := range x.CPUTune.VCPUPin {
		i, err := strconv.Atoi(strings.TrimSpace(p.VCPU))
		if err != nil || i < 0 {
			return tuning{}, fmt.Errorf("parse domain xml: vcpupin vcpu %q is not a vCPU index", p.VCPU)
		}
		cpus, err := parseCPUSet(p.CPUSet)
		if err != nil {
			return tuning{}, fmt.Errorf("parse domain xml: vcpupin of vcpu %d: %w", i, err)
		}
		t.pins[i] = cpus
	}
	return t, nil
}

// parseMicros reads a <period>/<quota> value; absent and negative ("no
// limit") are 0.
func parseMicros(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return max(v, 0), nil
}

// maxCPUSetSize bounds cpusets read from XML: a hostile or corrupt
// "0-4000000000" must not allocate gigabytes.
const maxCPUSetSize = 1 << 16

// parseCPUSet parses a libvirt cpuset such as "0-3,^2,6". Exclusions remove
// CPUs listed before them, as in libvirt.
func parseCPUSet(s string) ([]int, error) {
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		neg := strings.HasPrefix(part, "^")
		part = strings.TrimPrefix(part, "^")
		loS, hiS, isRange := strings.Cut(part, "-")
		lo, err := strconv.Atoi(loS)
		if err != nil || lo < 0 || lo >= maxCPUSetSize {
			return nil, fmt.Errorf("cpuset %q: bad cpu %q", s, loS)
		}
		hi := lo
		if isRange {
			hi, err = strconv.Atoi(hiS)
			if neg || err != nil || hi < lo || hi >= maxCPUSetSize {
				return nil, fmt.Errorf("cpuset %q: bad range %q", s, part)
			}
		}
		for c := lo; c <= hi; c++ {
			set[c] = !neg
		}
	}
	var out []int
	for c, in := range set {
		if in {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out, nil
}

// vcpuThread is one entry of QEMU's query-cpus-fast reply.
type vcpuThread struct {
	CPUIndex *int `json:"cpu-index"`
	ThreadID *int `json:"thread-id"`
}

// ParseQueryCPUsFast reads QEMU's reply to query-cpus-fast (through
// libvirt's monitor passthrough or a QMP socket): the host thread of each
// vCPU, sorted by index.
func ParseQueryCPUsFast(reply string) ([]VCPU, error) {
	var r struct {
		Return *[]vcpuThread `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return nil, fmt.Errorf("parse query-cpus-fast reply: %w", err)
	}
	if r.Error != nil {
		return nil, fmt.Errorf("query-cpus-fast: %s: %s", r.Error.Class, r.Error.Desc)
	}
	if r.Return == nil {
		return nil, errors.New("parse query-cpus-fast reply: no \"return\"")
	}
	var out []VCPU
	seen := map[int]bool{}
	for _, t := range *r.Return {
		if t.CPUIndex == nil || t.ThreadID == nil {
			return nil, errors.New("parse query-cpus-fast reply: entry without cpu-index or thread-id")
		}
		if *t.CPUIndex < 0 || *t.ThreadID <= 0 || seen[*t.CPUIndex] {
			return nil, fmt.Errorf("parse query-cpus-fast reply: bad entry cpu-index %d thread-id %d", *t.CPUIndex, *t.ThreadID)
		}
		seen[*t.CPUIndex] = true
		out = append(out, VCPU{Index: *t.CPUIndex, TID: *t.ThreadID})
	}
	if len(out) == 0 {
		return nil, errors.New("parse query-cpus-fast reply: no vCPUs")
	}
	slices.SortFunc(out, func(a, b VCPU) int { return a.Index - b.Index })
	return out, nil
}

// bitmapCPUs returns the CPUs set in a libvirt cpumap (bit i of byte i/8).
func bitmapCPUs(m []byte, ncpus int) []int {
	var out []int
	for c := 0; c < ncpus && c/8 < len(m); c++ {
		if m[c/8]&(1<<(c%8)) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// pinSet normalises a vCPU's allowed CPUs: allowed on every online CPU
// means not pinned (empty).
func pinSet(allowed, online []int) []int {
	if len(allowed) == 0 {
		return nil
	}
	all := true
	for _, c := range online {
		if !slices.Contains(allowed, c) {
			all = false
			break
		}
	}
	if all {
		return nil
	}
	return allowed
}

// monitorRetries: right after a domain starts, libvirt may still hold the
// domain's job lock and refuse the monitor command for a moment.
const (
	monitorRetries = 5
	monitorBackoff = 200 * time.Millisecond
)

// describe reads everything about one running domain.
func (c *conn) describe(dom lv.Domain) (d Domain, err error) {
	c.guard(func() { d, err = c.describeUnguarded(dom) })
	return d, err
}

func (c *conn) describeUnguarded(dom lv.Domain) (Domain, error) {
	xmlDesc, err := c.l.DomainGetXMLDesc(dom, 0)
	if err != nil {
		return Domain{}, fmt.Errorf("domain %s: get xml: %w", dom.Name, err)
	}
	t, err := parseDomainXML(xmlDesc)
	if err != nil {
		return Domain{}, fmt.Errorf("domain %s: %w", dom.Name, err)
	}

	var reply string
	for attempt := 1; ; attempt++ {
		reply, err = c.l.QEMUDomainMonitorCommand(dom, `{"execute":"query-cpus-fast"}`, 0)
		if err == nil || attempt == monitorRetries || errors.Is(err, lv.ErrInterrupted) || !c.l.IsConnected() {
			break
		}
		time.Sleep(monitorBackoff)
	}
	if err != nil {
		return Domain{}, fmt.Errorf("domain %s: query vCPU threads through the QEMU monitor: %w", dom.Name, err)
	}
	vcpus, err := ParseQueryCPUsFast(reply)
	if err != nil {
		return Domain{}, fmt.Errorf("domain %s: %w", dom.Name, err)
	}

	// Live pinning from libvirt; the XML only has what was configured.
	maplen := (c.hostCPUs + 7) / 8
	maxIndex := vcpus[len(vcpus)-1].Index
	cpumaps, n, pinErr := c.l.DomainGetVcpuPinInfo(dom, int32(maxIndex+1), int32(maplen), uint32(lv.DomainAffectLive))
	for i := range vcpus {
		idx := vcpus[i].Index
		if pinErr == nil && idx < int(n) && (idx+1)*maplen <= len(cpumaps) {
			allowed := bitmapCPUs(cpumaps[idx*maplen:(idx+1)*maplen], c.hostCPUs)
			vcpus[i].CPUs = pinSet(allowed, c.online)
		} else {
			vcpus[i].CPUs = pinSet(t.pins[idx], c.online)
		}
	}

	d := Domain{
		Name:     dom.Name,
		UUID:     formatUUID(dom.UUID),
		VCPUs:    vcpus,
		PeriodUS: t.periodUS,
		QuotaUS:  t.quotaUS,
		ID:       int(dom.ID),
		PID:      tgid(vcpus[0].TID),
	}
	if d.ID <= 0 {
		// Lifecycle events carry id -1 for some transitions; look it up.
		if fresh, err := c.l.DomainLookupByUUID(dom.UUID); err == nil {
			d.ID = int(fresh.ID)
		}
	}
	return d, nil
}

func formatUUID(u lv.UUID) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b.WriteByte('-')
		}
		b.WriteByte(hex[x>>4])
		b.WriteByte(hex[x&15])
	}
	return b.String()
}

// tgid returns the thread group (process) of a host thread, 0 if unknown.
func tgid(tid int) int {
	st, err := procstat.Status(tid)
	if err != nil {
		return 0
	}
	return st.TGID
}
