package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gromacsPy runs experiments/apps/gromacs.py with args and env added to a
// PATH without gmx; it returns stdout, stderr and the exit code.
func gromacsPy(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return appsPy(t, "gromacs.py", env, args...)
}

// appsPy runs the Python script of experiments/apps at path (relative to
// it) in that folder.
func appsPy(t *testing.T, script string, env []string, args ...string) (string, string, int) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: experiments/apps/" + script + " not run (CI installs python3)")
	}
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Dir = ".."
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestGromacsParseLog reads the performance of a recorded mdrun log (the
// 5 nm water box on the H200 machine: 4000 steps, counters reset at
// 2000): the steps, wall seconds and ns/day of the second half.
func TestGromacsParseLog(t *testing.T) {
	out, errs, code := gromacsPy(t, nil, "parse", "testdata/mdrun-water5.log")
	if code != 0 {
		t.Fatalf("parse: exit %d: %s", code, errs)
	}
	var r struct {
		Steps     int     `json:"steps"`
		WallS     float64 `json:"wall_s"`
		NsPerDay  float64 `json:"ns_per_day"`
		ResetStep int     `json:"reset_step"`
		HostS     float64 `json:"host_s"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("parse printed %q: %v", out, err)
	}
	// Update 0.033 s and Constraints 0.121 s in the accounting table;
	// with the update on the GPU, Neighbor search 0.094 s.
	if r.HostS != 0.154 {
		t.Errorf("host_s %v, want 0.154 (update and constraints)", r.HostS)
	}
	out, errs, code = gromacsPy(t, nil, "parse", "--update", "gpu", "testdata/mdrun-water5.log")
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.HostS != 0.094 {
		t.Errorf("parse --update gpu: exit %d, %q (%v): host_s %v, want 0.094 (pair search)", code, errs, err, r.HostS)
	}
	// ns/day is printed to 3 decimals: the steps it gives are within
	// 0.2% of the 2000 the counters covered.
	if r.Steps < 1996 || r.Steps > 2004 || r.WallS != 0.472 || r.NsPerDay != 733.09 || r.ResetStep != 2000 {
		t.Errorf("parsed %+v, want about 2000 steps, 0.472 s, 733.09 ns/day, reset at 2000", r)
	}
	// A log cut before the end (mdrun died): one line naming what is
	// missing, exit 2.
	b, err := os.ReadFile(filepath.Join("..", "testdata", "mdrun-water5.log"))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.log")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code = gromacsPy(t, nil, "parse", cut)
	if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "no Performance: / Time: line") {
		t.Errorf("a cut log: exit %d, stderr %q; want exit 2 and one line naming the missing lines", code, errs)
	}
}

// TestGromacsDryRun checks the commands of build and input: the build
// options that work on the GPU machine, the linked build's CMake include,
// an installed and stripped gmx packed with its force fields; and an
// energy minimisation before the MD input (an unminimised water box fails
// SETTLE and makes mdrun crash at its first steps: docs/gromacs.md).
func TestGromacsDryRun(t *testing.T) {
	// A source tree and a library install as the real run wants them:
	// a dry run checks them too.
	src, hs := filepath.Join(t.TempDir(), "gromacs"), filepath.Join(t.TempDir(), "hs")
	for _, d := range []string{src, filepath.Join(hs, "lib", "cmake", "hybridsync")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "CMakeLists.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--source", "/nonexistent", "--link-hybridsync", hs}, {"--source", src, "--link-hybridsync", "/nonexistent"}} {
		_, errs, code := gromacsPy(t, nil, append(append([]string{"build"}, bad...), "--out", "/o", "--dry-run")...)
		if code != 2 || strings.Count(errs, "\n") != 1 {
			t.Errorf("build --dry-run %v: exit %d, stderr %q; want exit 2 and one line", bad, code, errs)
		}
	}
	out, errs, code := gromacsPy(t, nil, "build", "--source", src, "--out", "/o", "--jobs", "3",
		"--link-hybridsync", hs, "--dry-run")
	if code != 0 {
		t.Fatalf("build --dry-run: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("build --dry-run printed %d commands, want configure, build, install, pack:\n%s", len(lines), out)
	}
	include, _ := filepath.Abs(filepath.Join("..", "gromacs-link.cmake"))
	for _, want := range []string{"cmake -S " + src + " -B /o/build -G Ninja", "-DGMX_GPU=CUDA", "-DCMAKE_CUDA_ARCHITECTURES=90",
		"-DGMX_FFT_LIBRARY=fftpack", "-DBUILD_SHARED_LIBS=OFF", "-DGMX_USE_HDF5=OFF", "-DGMX_HWLOC=OFF", "-DGMX_MPI=OFF",
		"-DGMX_EXTERNAL_BLAS=OFF", "-DGMX_EXTERNAL_LAPACK=OFF", "-DCMAKE_PREFIX_PATH=" + hs, "-DCMAKE_PROJECT_INCLUDE=" + include} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("configure %q lacks %q", lines[0], want)
		}
	}
	for i, want := range []string{"cmake --build /o/build -j 3", "cmake --install /o/build --strip",
		"tar -cJf /o/gmx.tar.xz -C /o/install bin/gmx share/gromacs/top"} {
		if lines[i+1] != want {
			t.Errorf("command %d: %q, want %q", i+2, lines[i+1], want)
		}
	}
	if _, err := os.Stat(include); err != nil {
		t.Errorf("the linked build's include: %v", err)
	}

	out, errs, code = gromacsPy(t, nil, "input", "--gmx", "gmx", "--out", "/w", "--box", "6", "--dry-run")
	if code != 0 {
		t.Fatalf("input --dry-run: exit %d: %s", code, errs)
	}
	order := []string{"gmx solvate -cs spc216.gro -box 6 6 6", "write /w/topol.top", "grompp -f em.mdp",
		"gmx mdrun -s em.tpr -deffnm em", "grompp -f md.mdp -c em.gro"}
	at := 0
	for _, want := range order {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Fatalf("input --dry-run: %q missing or out of order in:\n%s", want, out)
		}
		at += i
	}

	out, errs, code = gromacsPy(t, nil, "mdrun", "--gmx", "gmx", "--tpr", "/w/topol.tpr", "--seconds", "7.2", "--update", "gpu", "--dry-run")
	want := "gmx mdrun -s /w/topol.tpr -deffnm WORK/md -ntmpi 1 -ntomp 1 -nb gpu -pme gpu -update gpu -pin off -notunepme -noconfout -resethway -nsteps -1 -maxh 0.002000\n"
	if code != 0 || out != want {
		t.Errorf("mdrun --dry-run: exit %d, %q (stderr %q), want %q", code, out, errs, want)
	}
}

// TestGromacsBadInput: without gmx, or with a bad argument, each command
// says so in one line and exits 2, as the suite's GROMACS programs do when
// gmx is missing.
func TestGromacsBadInput(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"mdrun", "--tpr", "x.tpr"}, "gmx not found"},
		{[]string{"GMX=/nonexistent/gmx"}, []string{"mdrun", "--tpr", "x.tpr"}, "gmx not found"},
		{nil, []string{"mdrun", "--linked", "--tpr", "x.tpr"}, "GMX_LINKED is not set"},
		{nil, []string{"input", "--out", "/tmp/x"}, "gmx not found"},
		{[]string{"GMX=/bin/true"}, []string{"input", "--out", "/tmp/x", "--box", "1"}, "--box 1: want 3 to 20 nm"},
		{[]string{"GMX=/bin/true"}, []string{"mdrun", "--tpr", "/nonexistent.tpr"}, "--tpr /nonexistent.tpr: no such file"},
		{nil, []string{"build", "--source", "/nonexistent", "--out", "/tmp/x"}, "no CMakeLists.txt"},
		{nil, []string{"parse", "/nonexistent.log"}, "No such file"},
	} {
		_, errs, code := gromacsPy(t, c.env, c.args...)
		if code != 2 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 2 and one line with %q", c.env, c.args, code, errs, c.want)
		}
	}
}

// TestGromacsSuite: the committed GROMACS suite names gromacs.py programs
// that each have a linked build, so every arm, hybridsync-linked too,
// can run them; a program of several OpenMP threads runs on as many CPUs.
func TestGromacsSuite(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "gromacs.json"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ParseSuite(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: the suite's programs cannot be resolved (CI installs python3)")
	}
	c := Config{Programs: ps, Dir: "..", Arms: AllArms, Contention: []string{"none"}, Reps: 1, CPU: -1,
		Timeout: 1, CapQuota: 1, CapPeriod: 1}
	// Any existing files: the arms that preload need them to exist, the
	// launcher's to be executable.
	c.Lib = filepath.Join("..", "gromacs.py")
	c.Blocksync = c.Lib
	if c.Launcher, err = exec.LookPath("true"); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	threads := map[int]bool{}
	for _, p := range c.Programs {
		if !strings.Contains(p.Command, "gromacs.py mdrun") || !strings.Contains(p.Command, "--name "+p.Name) {
			t.Errorf("program %s: %q, want gromacs.py mdrun naming it", p.Name, p.Command)
		}
		ntomp := 1
		if _, after, ok := strings.Cut(p.Command, "--ntomp "); ok {
			fmt.Sscan(after, &ntomp)
		}
		if want := map[bool]int{true: ntomp, false: 0}[ntomp > 1]; p.CPUs != want {
			t.Errorf("program %s: %d OpenMP threads on \"cpus\" %d, want %d", p.Name, ntomp, p.CPUs, want)
		}
		threads[ntomp] = true
	}
	if !threads[2] || !threads[4] {
		t.Errorf("OpenMP threads of the programs: %v, want programs of 2 and of 4", threads)
	}
}
