package apptable

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func near(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }

// TestSummarize computes the table from known runs: medians (odd and even
// counts), ratios to the fastest arm alone with min-max, failed runs left out,
// the best arm, and the verdicts. All runs here do 1000 steps, so the
// ratios of time per step are those of wall time.
func TestSummarize(t *testing.T) {
	var runs []Run
	add := func(p, c, a string, walls []float64, cpus []float64) {
		for i, w := range walls {
			runs = append(runs, Run{Program: p, Contention: c, Arm: a, Rep: i, WallS: w, CPUS: cpus[i], Steps: 1000})
		}
	}
	add("p", "none", "cuda-default", []float64{2.0, 1.9, 2.2}, []float64{2, 2, 2})
	add("p", "none", "cuda-blocking", []float64{2.1, 2.3, 1.95}, []float64{1, 1.2, 0.8})
	add("p", "none", "hybridsync", []float64{2.04, 2.0, 2.5, 1.9}, []float64{1, 2, 3, 4}) // even: (2.0+2.04)/2
	// A failed run with a tiny wall time must not count.
	runs = append(runs, Run{Program: "p", Contention: "none", Arm: "hybridsync", WallS: 0.01, Error: "exit status 1", ExitStatus: 1})
	add("p", "while1", "cuda-default", []float64{4, 3.6, 3.8}, []float64{1, 1, 1})
	add("p", "while1", "cuda-blocking", []float64{2.4, 2.6, 2.5}, []float64{1, 1, 1})
	add("p", "while1", "hybridsync", []float64{2.6, 2.7, 2.55}, []float64{1, 1, 1})
	// q has only hybridsync alone: its reference.
	add("q", "none", "hybridsync", []float64{3, 1}, []float64{1, 1})

	rows := Summarize(runs, []string{"p", "q"}, []string{"none", "while1"}, defaultArms)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3 (q was not run beside while1)", len(rows))
	}
	none, w1 := rows[0], rows[1]
	d, b, h := none.Arms[0], none.Arms[1], none.Arms[2]
	if d.WallS != 2.0 || !near(d.Ratio, 1) || !near(d.RatioMin, 0.95) || !near(d.RatioMax, 1.1) || d.CPUS != 2 || d.Runs != 3 || d.Steps != 1000 || math.Abs(d.StepUS-2000) > 1e-6 || math.Abs(d.CPUStepUS-2000) > 1e-6 {
		t.Errorf("cuda-default alone: %+v", d)
	}
	if b.WallS != 2.1 || !near(b.Ratio, 1.05) || !near(b.RatioMin, 0.975) || !near(b.RatioMax, 1.15) || b.CPUS != 1 {
		t.Errorf("cuda-blocking alone: %+v", b)
	}
	if math.Abs(h.WallS-2.02) > 1e-9 || h.Runs != 4 || h.Failed != 1 || !near(h.Ratio, 1.01) || !near(h.RatioMin, 0.95) || !near(h.RatioMax, 1.25) || h.CPUS != 2.5 {
		t.Errorf("hybridsync alone: %+v", h)
	}
	// Alone: cuda-default best (2.0); hybridsync 1% behind it: within 3%, but slower.
	if none.Best != "cuda-default" || !near(none.HSVsBestCUDA, 1.01) || !near(none.HSVsDefault, 1.01) || !*none.HSWithin3Pct || *none.HSNotSlower {
		t.Errorf("alone: %+v", none)
	}
	// while1: blocking 2.5 best; hybridsync 2.6 is 4% behind it, faster than default 3.8.
	if w1.Best != "cuda-blocking" || !near(w1.HSVsBestCUDA, 2.6/2.5) || *w1.HSWithin3Pct || !*w1.HSNotSlower || !near(w1.Arms[2].Ratio, 1.3) {
		t.Errorf("while1: %+v", w1)
	}
	// By repetition (rep 3 of hybridsync alone has no partner): alone
	// 2.04/2.0, 2.0/1.9, 2.5/2.2 over default, median 2.0/1.9; over
	// blocking 2.04/2.1 is the median, so the better arm by repetition
	// is default. Under while1: 2.7/2.6 over blocking, 2.55/3.8 over default.
	med := func(p *Paired) *float64 {
		if p == nil {
			return nil
		}
		return &p.Median
	}
	if !near(med(none.HSVsDefaultPaired), 2.0/1.9) || !near(med(none.HSVsBestCUDAPaired), 2.0/1.9) {
		t.Errorf("alone, paired: %+v %+v", none.HSVsDefaultPaired, none.HSVsBestCUDAPaired)
	}
	if !near(med(w1.HSVsDefaultPaired), 2.55/3.8) || !near(med(w1.HSVsBestCUDAPaired), 2.7/2.6) {
		t.Errorf("while1, paired: %+v %+v", w1.HSVsDefaultPaired, w1.HSVsBestCUDAPaired)
	}
	// Three repetitions: [min, max] at 75%; over the better arm, the
	// larger bounds at 50%. Too low a level to decide either target.
	if p := w1.HSVsDefaultPaired; p.N != 3 || p.Level != 0.75 || !near(&p.CI[0], 2.6/4) || !near(&p.CI[1], 2.7/3.6) {
		t.Errorf("while1 vs default: %+v", p)
	}
	if p := w1.HSVsBestCUDAPaired; p.N != 3 || p.Level != 0.5 || !near(&p.CI[0], 2.55/2.5) || !near(&p.CI[1], 2.6/2.4) {
		t.Errorf("while1 vs best: %+v", p)
	}
	if none.Verdict != "open: >2% behind default" || w1.Verdict != "open: >3% behind the better CUDA mode, slower than default" {
		t.Errorf("verdicts %q, %q", none.Verdict, w1.Verdict)
	}
	q := rows[2]
	if q.Arms[2].WallS != 2 || !near(q.Arms[2].Ratio, 1) || !near(q.Arms[2].RatioMin, 0.5) || q.Arms[0].Runs != 0 || q.Best != "hybridsync" || q.HSVsBestCUDA != nil || q.HSWithin3Pct != nil || q.HSVsBestCUDAPaired != nil {
		t.Errorf("q: %+v", q)
	}

	out, lines := printed(t, rows)
	for i, want := range []string{
		"cuda-default wall",
		"p none 1.00 [0.95-1.10] 2.000 1.05 [0.97-1.15] 1.000 1.01 [0.95-1.25] 2.500 cuda-default +1.0% +1.0% +5.3% [+2.0,+28.2] / +5.3% [+2.0,+13.6] 3 (50%) open: >2% behind default T: T 2000.0 / 2C 2000.0 µs - 1",
		"p while1 1.90 [1.80-2.00] 1.000 1.25 [1.20-1.30] 1.000 1.30 [1.27-1.35] 1.000 cuda-blocking +4.0% -31.6% +3.8% [+2.0,+8.3] / -32.9% [-35.0,-25.0] 3 (50%) open: >3% behind the better CUDA mode, slower than default T: T 2000.0 / 2C 2000.0 µs 1.90 / 1.25 / 1.30 0",
		"q none - - - - 1.00 [0.50-1.50] 1.000 hybridsync - - - / - - - - - 0",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("table line %d lacks %q:\n%s", i, want, out)
		}
	}
}

// TestSummarizePerStep: programs run for a fixed time do as many steps as
// fit, so arms are compared by wall time per step, not by wall time.
func TestSummarizePerStep(t *testing.T) {
	runs := []Run{
		{Program: "p", Contention: "none", Arm: "cuda-default", WallS: 2, CPUS: 2, Steps: 1000},
		{Program: "p", Contention: "while1", Arm: "cuda-default", WallS: 2.1, CPUS: 1, Steps: 500},
		{Program: "p", Contention: "while1", Arm: "cuda-blocking", WallS: 2, CPUS: 0.5, Steps: 800},
		{Program: "p", Contention: "while1", Arm: "hybridsync", WallS: 2.5, CPUS: 1, Steps: 1000},
	}
	rows := Summarize(runs, []string{"p"}, []string{"while1"}, defaultArms)
	r := rows[0]
	if !near(r.Arms[0].Ratio, 2.1) || !near(r.Arms[1].Ratio, 1.25) || !near(r.Arms[2].Ratio, 1.25) {
		t.Errorf("ratios %v %v %v, want 2.1 1.25 1.25", *r.Arms[0].Ratio, *r.Arms[1].Ratio, *r.Arms[2].Ratio)
	}
	if math.Abs(r.Arms[1].CPUStepUS-625) > 1e-6 || math.Abs(r.Arms[2].StepUS-2500) > 1e-6 {
		t.Errorf("per step: %+v", r.Arms)
	}
	// hybridsync ties blocking per step (the first of equals stays best).
	if r.Best != "cuda-blocking" || !near(r.HSVsBestCUDA, 1) || !*r.HSWithin3Pct || !*r.HSNotSlower {
		t.Errorf("%+v", r)
	}
}

// TestVerdict decides each target from the paired interval, and leaves it
// open where the interval straddles the bound or its level is too low.
func TestVerdict(t *testing.T) {
	p := func(lo, hi, level float64) *Paired {
		return &Paired{Median: (lo + hi) / 2, CI: [2]float64{lo, hi}, Level: level, N: 10}
	}
	for _, tc := range []struct {
		best, def *Paired
		want      string
	}{
		{p(0.95, 1.02, 0.95), p(0.6, 0.9, 0.97), "met"},
		{p(1.04, 1.10, 0.95), p(0.6, 0.9, 0.97), "MISSED: >3% behind the better CUDA mode"},
		{p(1.04, 1.10, 0.95), p(1.01, 1.10, 0.97), "MISSED: >3% behind the better CUDA mode, slower than default"},
		{p(0.99, 1.05, 0.95), p(0.99, 1.05, 0.97), "open: >3% behind the better CUDA mode, slower than default"},
		{p(0.95, 1.02, 0.8), p(0.95, 0.99, 0.97), "open: >3% behind the better CUDA mode"},
		{p(1.04, 1.10, 0.95), p(0.99, 1.01, 0.97), "MISSED: >3% behind the better CUDA mode"},
	} {
		if got := verdict(Row{HSVsBestCUDAPaired: tc.best, HSVsDefaultPaired: tc.def}); got != tc.want {
			t.Errorf("%+v %+v: %q, want %q", *tc.best, *tc.def, got, tc.want)
		}
	}
	// Alone, the target is within 2% of default.
	for _, tc := range []struct {
		def  *Paired
		want string
	}{{p(0.97, 1.019, 0.97), "met"}, {p(1.021, 1.05, 0.97), "MISSED: >2% behind default"}, {p(0.99, 1.03, 0.97), "open: >2% behind default"}} {
		if got := verdict(Row{Contention: "none", HSVsBestCUDAPaired: p(1.04, 1.1, 0.95), HSVsDefaultPaired: tc.def}); got != tc.want {
			t.Errorf("alone, %+v: %q, want %q", *tc.def, got, tc.want)
		}
	}
	// Without repetitions to pair, the medians decide.
	if got := verdict(Row{HSWithin3Pct: ptr(true), HSNotSlower: ptr(false)}); got != "MISSED: slower than default" {
		t.Errorf("medians: %q", got)
	}
}

// TestLimit: the limit under a co-runner is the larger of the fastest
// arm's time per step alone (T) and twice the cuda-blocking arm's CPU per
// step alone (2C); each arm's contended time is given over it. Runs here
// are rounds of in-process programs, 1000 steps each, three rounds per
// arm at 0.99, 1 and 1.01 times a median.
func TestLimit(t *testing.T) {
	var runs []Run
	add := func(p, c, a string, wall, cpuShare float64) {
		for i, f := range []float64{0.99, 1, 1.01} {
			runs = append(runs, Run{Program: p, Contention: c, Arm: a, Round: i + 1, Steps: 1000, WallS: wall * f, CPUS: wall * f * cpuShare})
		}
	}
	// CPU-bound (launches): blocking alone needs 0.9 of a CPU, so the fair
	// share decides: 2C = 2 x 405 µs over T = 400 µs (the default arm's).
	add("cpu", "none", "cuda-default", 0.4, 1)
	add("cpu", "none", "cuda-blocking", 0.45, 0.9)
	add("cpu", "none", "hybridsync", 0.41, 1)
	add("cpu", "while1", "cuda-default", 0.85, 0.5)
	add("cpu", "while1", "cuda-blocking", 0.92, 0.5)
	add("cpu", "while1", "hybridsync", 0.8451, 0.5)
	// GPU-bound: blocking alone needs 0.3 of a CPU: T = 864 µs, 2C = 570 µs.
	add("gpu", "none", "cuda-default", 0.864, 1)
	add("gpu", "none", "cuda-blocking", 0.95, 0.3)
	add("gpu", "while1", "cuda-default", 1.62, 0.5)
	add("gpu", "while1", "cuda-blocking", 1.04, 0.3)
	// No cuda-blocking run alone: no limit.
	add("nolimit", "none", "cuda-default", 1, 1)
	add("nolimit", "while1", "cuda-default", 2, 0.5)

	rows := Summarize(runs, []string{"cpu", "gpu", "nolimit"}, []string{"none", "while1"}, defaultArms)
	cpu, cpuW1, gpu, gpuW1, nl := rows[0].Limit, rows[1], rows[2].Limit, rows[3], rows[4]
	if cpu == nil || cpu.Bound != "2C" || math.Abs(cpu.TUS-400) > 1e-6 || math.Abs(cpu.TwoCUS-810) > 1e-6 || math.Abs(cpu.US-810) > 1e-6 || cpuW1.Limit != cpu {
		t.Errorf("CPU-bound limit %+v (while1's %+v)", cpu, cpuW1.Limit)
	}
	if gpu == nil || gpu.Bound != "T" || math.Abs(gpu.TUS-864) > 1e-6 || math.Abs(gpu.TwoCUS-570) > 1e-6 || math.Abs(gpu.US-864) > 1e-6 {
		t.Errorf("GPU-bound limit %+v", gpu)
	}
	if nl.Limit != nil || rows[5].Arms[0].VsLimit != nil {
		t.Errorf("no cuda-blocking alone: limit %+v, vs %v", nl.Limit, rows[5].Arms[0].VsLimit)
	}
	// Alone, no ratio to the limit; under while1 each measured arm's.
	for _, a := range rows[0].Arms {
		if a.VsLimit != nil {
			t.Errorf("alone, %s: vs limit %v", a.Arm, *a.VsLimit)
		}
	}
	if a := cpuW1.Arms; !near(a[0].VsLimit, 850.0/810) || !near(a[1].VsLimit, 920.0/810) || !near(a[2].VsLimit, 845.1/810) {
		t.Errorf("CPU-bound under while1: %v %v %v", *a[0].VsLimit, *a[1].VsLimit, *a[2].VsLimit)
	}
	if a := gpuW1.Arms; !near(a[0].VsLimit, 1620.0/864) || !near(a[1].VsLimit, 1040.0/864) || a[2].VsLimit != nil {
		t.Errorf("GPU-bound under while1: %+v", a)
	}

	out, lines := printed(t, rows)
	for i, want := range []string{
		"limit arms / limit failed",
		"2C: T 400.0 / 2C 810.0 µs - 0",
		"2C: T 400.0 / 2C 810.0 µs 1.05 / 1.14 / 1.04 0",
		"T: T 864.0 / 2C 570.0 µs - 0",
		"T: T 864.0 / 2C 570.0 µs 1.88 / 1.20 / - 0",
		"- - 0",
		"- - 0",
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("table line %d does not end in %q:\n%s", i, want, out)
		}
	}
	// Without cuda-blocking or hybridsync (an OpenMP program's advise),
	// no column of theirs: nothing is shown that was not measured.
	_, lines = printed(t, rows[4:])
	if h := lines[0]; strings.Contains(h, "limit") || strings.Contains(h, "hybridsync vs best CUDA") || strings.Contains(h, "co-runner CPU") {
		t.Errorf("columns not measured: %q", h)
	}
}

// printed is PrintTable's output, whole and as lines with their columns
// one space apart.
func printed(t *testing.T, rows []Row) (string, []string) {
	t.Helper()
	var b bytes.Buffer
	if err := PrintTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i := range lines {
		lines[i] = strings.Join(strings.Fields(lines[i]), " ")
	}
	return b.String(), lines
}

// TestOthersCPUShare: where rounds say how long their CPU was busy, each
// arm's share of it that went to others (the co-runner) is the busy time
// less the program's own CPU over the wall time, median over rounds;
// alone, or where nothing was measured, the column is "-".
func TestOthersCPUShare(t *testing.T) {
	var runs []Run
	add := func(c, a string, wall, cpu, busy float64) {
		for i := range 3 {
			runs = append(runs, Run{Program: "p", Contention: c, Arm: a, Round: i + 1, Steps: 100, WallS: wall, CPUS: cpu, CPUBusyS: ptr(busy)})
		}
	}
	add("none", "cuda-default", 0.3, 0.3, 0.3)
	add("while1", "cuda-default", 0.3, 0.15, 0.3)   // half each
	add("while1", "cuda-blocking", 0.3, 0.06, 0.27) // the co-runner 70%
	runs = append(runs, Run{Program: "p", Contention: "while1", Arm: "hybridsync", Steps: 100, WallS: 0.3, CPUS: 0.1})
	rows := Summarize(runs, []string{"p"}, []string{"none", "while1"}, defaultArms)
	w := rows[1].Arms
	if !near(w[0].OthersCPUShare, 0.5) || !near(w[1].OthersCPUShare, 0.7) || w[2].OthersCPUShare != nil {
		t.Errorf("shares %v %v %v; want 0.5, 0.7 and none", w[0].OthersCPUShare, w[1].OthersCPUShare, w[2].OthersCPUShare)
	}
	_, lines := printed(t, rows)
	if !strings.HasSuffix(lines[1], " - 0") || !strings.HasSuffix(lines[2], " 50% / 70% / - 0") {
		t.Errorf("co-runner column:\n%s\n%s", lines[1], lines[2])
	}
}

// TestSummarizeAA: the A/A arm is paired with cuda-default by repetition,
// and the table shows that column only when some row has it.
func TestSummarizeAA(t *testing.T) {
	var runs []Run
	for i, w := range []float64{2.0, 2.2, 1.9} {
		runs = append(runs, Run{Program: "p", Contention: "none", Arm: "cuda-default", Rep: i, WallS: w, CPUS: 1, Steps: 1000},
			Run{Program: "p", Contention: "none", Arm: "cuda-default-again", Rep: i, WallS: w * (1 + 0.01*float64(i)), CPUS: 1, Steps: 1000},
			Run{Program: "p", Contention: "none", Arm: "hybridsync", Rep: i, WallS: w, CPUS: 1, Steps: 1000})
	}
	arms := []string{"cuda-default", "hybridsync", "cuda-default-again"}
	rows := Summarize(runs, []string{"p"}, []string{"none"}, arms)
	if aa := rows[0].AAPaired; aa == nil || aa.N != 3 || math.Abs(aa.Median-1.01) > 1e-9 {
		t.Fatalf("A/A %+v, want the median of 1, 1.01, 1.02 over 3", aa)
	}
	var with, without bytes.Buffer
	PrintTable(&with, rows)
	PrintTable(&without, Summarize(runs, []string{"p"}, []string{"none"}, arms[:2]))
	if !strings.Contains(with.String(), "A/A paired [CI]") || !strings.Contains(with.String(), "+1.0% [") || strings.Contains(without.String(), "A/A") {
		t.Errorf("with the A/A arm:\n%s\nwithout:\n%s", with.String(), without.String())
	}
}

// TestSummarizeOnlyCellsRun: files of different cells taken together
// (`apps --from a,b`) give a row for each program and setting some run
// has, none for the pairs no file ran.
func TestSummarizeOnlyCellsRun(t *testing.T) {
	runs := []Run{
		{Program: "p", Contention: "none", Arm: "cuda-default", WallS: 1, CPUS: 1, Steps: 10},
		{Program: "q", Contention: "while1", Arm: "hybridsync", WallS: 1, CPUS: 1, Steps: 10},
		{Program: "q", Contention: "while1", Arm: "cuda-default", ExitStatus: 1, Error: "exit status 1"},
	}
	programs, contentions, arms := Present(runs)
	var got []string
	for _, r := range Summarize(runs, programs, contentions, arms) {
		got = append(got, r.Program+"/"+r.Contention)
	}
	if !slices.Equal(got, []string{"p/none", "q/while1"}) {
		t.Errorf("rows %q, want p/none and q/while1 (a failed run's cell included)", got)
	}
}

// defaultArms are apps' default arms.
var defaultArms = []string{"cuda-default", "cuda-blocking", "hybridsync"}

// TestScriptArms: a script's runs (gromacs-omp.sh) keep the arms apps
// does not know, after those it does, each paired with cuda-default, and
// the busy loops' share that the script measured is the co-runner column.
func TestScriptArms(t *testing.T) {
	var runs []Run
	for rep, w := range []float64{4, 5, 6} {
		for _, a := range []struct {
			arm   string
			ratio float64
		}{{"hybridsync-spin3k", 0.5}, {"omp-passive", 0.6}, {"cuda-default", 1}, {"hybridsync-spin1k", 0.4}} {
			runs = append(runs, Run{Program: "g", Contention: "while1x4", Arm: a.arm, Rep: rep, WallS: w * a.ratio, CPUS: 1, Steps: 1000, CoRunnersShare: ptr(a.ratio)})
		}
	}
	programs, contentions, arms := Present(runs)
	if want := []string{"cuda-default", "omp-passive", "hybridsync-spin1k", "hybridsync-spin3k"}; !slices.Equal(arms, want) {
		t.Fatalf("arms %q, want %q", arms, want)
	}
	rows := Summarize(runs, programs, contentions, arms)
	for a, want := range map[string]float64{"omp-passive": 0.6, "hybridsync-spin1k": 0.4, "hybridsync-spin3k": 0.5} {
		if p := rows[0].VsDefaultPaired[a]; p == nil || math.Abs(p.Median-want) > 1e-9 {
			t.Errorf("%s vs default %+v, want %v", a, p, want)
		}
	}
	_, lines := printed(t, rows)
	if !strings.Contains(lines[1], "hybridsync-spin1k -60.0% [") || !strings.HasSuffix(lines[1], " 100% / 60% / 40% / 50% 0") {
		t.Errorf("row:\n%s", lines[1])
	}
}

// The limit's T and 2C read in the unit of their size: a step's in µs, a
// program timed whole in s (not millions of µs).
func TestLimitUnits(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Limit{Bound: "2C", TUS: 400, TwoCUS: 810}, "2C: T 400.0 / 2C 810.0 µs"},
		{Limit{Bound: "T", TUS: 25000, TwoCUS: 12000}, "T: T 25.0 / 2C 12.0 ms"},
		{Limit{Bound: "2C", TUS: 1947587.2, TwoCUS: 1955677.0, CPUs: 2}, "2C: T 1.95 / 2C 1.96 s (C over 2 CPUs)"},
	} {
		if got := limitCol(&tc.l); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.l, got, tc.want)
		}
	}
}
