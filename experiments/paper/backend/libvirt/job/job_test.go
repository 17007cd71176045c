package job

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-probe/vgpu-probe/experiments/paper/workload"
	"github.com/vgpu-probe/vgpu-probe/hybridsync"
	"github.com/vgpu-probe/vgpu-probe/hybridsync/simdev"
)

func loopJob() Job {
	return Job{Kind: Loop, Mode: hybridsync.ModeSpin, Config: workload.Config{Steps: 20, Work: 100, Profile: simdev.Fixed("k", 200*time.Microsecond, 0), Seed: 1}}
}

func TestCmdlineRoundTrip(t *testing.T) {
	for _, j := range []Job{{Kind: Serve}, {Kind: Corunner, Corunner: "while1"}, loopJob()} {
		c, err := j.Cmdline()
		if err != nil {
			t.Fatal(err)
		}
		v, ok := strings.CutPrefix(c, CmdlineKey+"=")
		if !ok || strings.ContainsAny(v, " \t\"'") {
			t.Fatalf("cmdline %q: want %s= and no spaces or quotes", c, CmdlineKey)
		}
		got, err := ParseCmdlineValue(v)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind != j.Kind || got.Corunner != j.Corunner || got.Config.Steps != j.Config.Steps {
			t.Errorf("round trip: %+v, want %+v", got, j)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	bad := []Job{
		{Kind: "reboot"},
		{Kind: Loop, Mode: hybridsync.Mode(99), Config: loopJob().Config},
		{Kind: Loop, Mode: hybridsync.ModeSpin},
		{Kind: Loop, Mode: hybridsync.ModeHybrid, Config: loopJob().Config, Threshold: "oracle"},
		{Kind: Calibrate},
		{Kind: Gaps, Seconds: -1},
		{Kind: Corunner, Corunner: "fork-bomb"},
		{Kind: Command},
		{Kind: Command, Argv: []string{"true"}, Env: []string{"NOEQUALS"}},
	}
	for _, j := range bad {
		if err := j.Validate(); err == nil {
			t.Errorf("%+v: no error", j)
		}
		if _, err := j.Cmdline(); err == nil {
			t.Errorf("%+v: Cmdline gave no error", j)
		}
	}
	for _, v := range []string{"%%%", "bm90IGpzb24"} {
		if _, err := ParseCmdlineValue(v); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}

// pipePort is the guest's port in memory: the host's lines in, the
// guest's replies out.
type pipePort struct {
	io.Reader
	out *bytes.Buffer
}

func (p pipePort) Write(b []byte) (int, error) { return p.out.Write(b) }

func replies(t *testing.T, b *bytes.Buffer) []Reply {
	t.Helper()
	var rs []Reply
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var r Reply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("reply %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// The guest side on this host: serve answers ready, then each job, and
// stops at poweroff; a bad job line is an error reply, not the end.
func TestServe(t *testing.T) {
	var in bytes.Buffer
	for _, j := range []Job{{ID: 1, Kind: Ping}, {ID: 2, Kind: Calibrate, HostNs: 100_000}, {ID: 3, Kind: Gaps, Seconds: 0.05}} {
		b, _ := json.Marshal(j)
		in.Write(append(b, '\n'))
	}
	in.WriteString("{not json\n")
	lj := loopJob()
	lj.ID = 4
	b, _ := json.Marshal(lj)
	in.Write(append(b, '\n'))
	in.WriteString(`{"id":5,"kind":"poweroff"}` + "\n")
	out := &bytes.Buffer{}
	if err := RunGuest(Job{Kind: Serve}, pipePort{Reader: &in, out: out}); err != nil {
		t.Fatal(err)
	}
	got := map[int]Reply{}
	ready, errs := 0, 0
	for _, r := range replies(t, out) {
		switch r.Type {
		case TypeReady:
			ready++
		case TypeError:
			errs++
		default:
			got[r.ID] = r
		}
	}
	if ready < 1 || errs != 1 {
		t.Errorf("%d ready and %d error replies, want at least 1 and exactly 1", ready, errs)
	}
	if got[2].Work <= 0 || len(got[3].Gaps) == 0 || got[3].Gaps[0].EndNs <= got[3].Gaps[0].StartNs {
		t.Errorf("calibrate %+v, gaps %+v", got[2], got[3])
	}
	if r := got[4].Result; r == nil || r.Steps != 20 || r.CPUS <= 0 {
		t.Errorf("loop result %+v", r)
	}
}

func TestOneShotError(t *testing.T) {
	out := &bytes.Buffer{}
	if err := RunGuest(Job{Kind: Loop, Mode: hybridsync.Mode(99)}, pipePort{Reader: strings.NewReader(""), out: out}); err == nil {
		t.Fatal("no error")
	}
	if rs := replies(t, out); len(rs) != 1 || rs[0].Type != TypeError {
		t.Errorf("replies %+v, want one error", rs)
	}
}

// A job naming an unknown mode is refused with an error that names it,
// from the kernel command line and from the port, where the reply carries
// the job's id.
func TestBadMode(t *testing.T) {
	line := `{"id":7,"kind":"loop","mode":"nap","config":{"steps":20}}`
	if _, err := ParseCmdlineValue(base64.RawURLEncoding.EncodeToString([]byte(line))); err == nil || !strings.Contains(err.Error(), `unknown mode "nap"`) {
		t.Errorf("cmdline: %v, want unknown mode \"nap\"", err)
	}
	out := &bytes.Buffer{}
	g := &guest{port: pipePort{out: out}, heard: make(chan struct{})}
	jobs := make(chan Job, 1)
	g.read(strings.NewReader(line+"\n"), jobs)
	if j, ok := <-jobs; ok {
		t.Errorf("job %+v passed on", j)
	}
	var got []Reply
	for _, r := range replies(t, out) {
		if r.Type == TypeError {
			got = append(got, r)
		}
	}
	if len(got) != 1 || got[0].ID != 7 || !strings.Contains(got[0].Error, `unknown mode "nap"`) {
		t.Errorf("error replies %+v, want one for job 7 naming the mode", got)
	}
}
