"""GROMACS in the suite: build a release with CUDA, make its inputs from
GROMACS's own shipped data, and run `gmx mdrun` as one of the suite's
programs. docs/gromacs.md says how the pieces fit.

  python3 gromacs.py build --source SRC --out DIR [--link-hybridsync PREFIX]
  python3 gromacs.py input --gmx GMX --out DIR [--box NM]
  python3 gromacs.py mdrun --tpr FILE [--gmx GMX] [--update cpu|gpu] [--seconds S | --steps N]
  python3 gromacs.py parse LOG

build: configures and builds SRC (a GROMACS source tree, e.g. a release
exported from GROMACS's public repository) with CUDA for this machine's
GPU, installs it stripped under DIR and packs bin/gmx with share/gromacs/top
into DIR/gmx.tar.xz, which another machine unpacks and runs as it is.
--link-hybridsync PREFIX links libhybridsync (installed under PREFIX) into
every GROMACS target through its CMake package (gromacs-link.cmake beside
this script), with no change to GROMACS's sources.

input: a cubic box of SPC/E water of NM nm (gmx solvate from spc216.gro),
energy-minimised, and a PME MD run input DIR/topol.tpr.

mdrun: the suite program. One rank, one OpenMP thread, nonbondeds and PME
on the GPU, update on the CPU or the GPU, no thread pinning (the suite pins
the process). mdrun resets its counters half-way; the result line gives the
second half: {"program","steps","wall_s","cpu_s","ns_per_day","host_s"}, with
cpu_s the process's CPU seconds over the same window and host_s the wall
seconds mdrun's own accounting gives CPU-side work that no wait is part
of: the update and constraints, or with the update on the GPU the pair
search. It gauges how fast this process's CPU ran (docs/gromacs.md,
"Comparing arms alone"). "apps: ready" goes to stderr when mdrun starts its steps.

Every command takes --dry-run: it prints the commands it would run (one per
line, shell-quoted) and runs none.
"""
import argparse
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Options that configure on the GPU machine: static HDF5 and OpenBLAS do not
# link there, and hwloc is absent; fftpack keeps FFTW out of the build (PME
# runs on the GPU, with cuFFT). Static libraries make one self-contained
# binary that the suite can carry.
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGMX_GPU=CUDA",
    "-DGMX_FFT_LIBRARY=fftpack",
    "-DBUILD_TESTING=OFF",
    "-DGMX_USE_HDF5=OFF",
    "-DGMX_HWLOC=OFF",
    "-DGMX_MPI=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGMX_EXTERNAL_BLAS=OFF",
    "-DGMX_EXTERNAL_LAPACK=OFF",
    "-DGMX_INSTALL_LEGACY_API=OFF",
]

MDP_MD = """\
integrator      = md
dt              = 0.002
nsteps          = -1
cutoff-scheme   = Verlet
coulombtype     = PME
rcoulomb        = 1.0
rvdw            = 1.0
fourierspacing  = 0.125
tcoupl          = v-rescale
tc-grps         = System
tau-t           = 0.1
ref-t           = 300
gen-vel         = yes
gen-temp        = 300
nstcalcenergy   = 100
nstenergy       = 0
nstlog          = 0
nstxout-compressed = 0
"""

MDP_EM = """\
integrator      = steep
nsteps          = 500
emtol           = 1000
cutoff-scheme   = Verlet
coulombtype     = PME
rcoulomb        = 1.0
rvdw            = 1.0
"""

TOPOLOGY = """\
#include "oplsaa.ff/forcefield.itp"
#include "oplsaa.ff/spce.itp"

[ system ]
SPC/E water, {box} nm box

[ molecules ]
SOL {waters}
"""


class Failure(Exception):
    """One line for the user; the command exits 2."""


class Runner:
    """Runs commands, or prints them under --dry-run."""

    def __init__(self, dry):
        self.dry = dry

    def run(self, argv, cwd=None, stdin=None, env=None):
        if self.dry:
            print(("cd %s && " % shlex.quote(cwd) if cwd else "") + shlex.join(argv))
            return
        r = subprocess.run(argv, cwd=cwd, input=stdin, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-4000:])
            raise Failure("%s exited %d" % (shlex.join(argv[:3]), r.returncode))


def find_gmx(given):
    path = given or os.environ.get("GMX") or shutil.which("gmx")
    if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise Failure("gmx not found%s: build it with `gromacs.py build` and give --gmx or GMX"
                      % (" at " + given if given else ""))
    return os.path.abspath(path)


# --- build ------------------------------------------------------------------

def cmd_build(a, run):
    src = os.path.abspath(a.source)
    # Checked in a dry run too: it says what the real run would do.
    if not os.path.isfile(os.path.join(src, "CMakeLists.txt")):
        raise Failure("--source %s: no CMakeLists.txt there (a GROMACS source tree)" % a.source)
    if a.link_hybridsync and not os.path.isdir(os.path.join(a.link_hybridsync, "lib", "cmake", "hybridsync")):
        raise Failure("--link-hybridsync %s: no lib/cmake/hybridsync there (make install-lib PREFIX=...)" % a.link_hybridsync)
    out = os.path.abspath(a.out)
    build = os.path.abspath(a.build or os.path.join(out, "build"))
    prefix = os.path.join(out, "install")
    cfg = ["cmake", "-S", src, "-B", build, "-G", "Ninja",
           "-DCMAKE_CUDA_ARCHITECTURES=" + a.cuda_arch,
           "-DCMAKE_INSTALL_PREFIX=" + prefix] + CMAKE_OPTIONS
    if a.simd:
        cfg.append("-DGMX_SIMD=" + a.simd)
    if a.link_hybridsync:
        hs = os.path.abspath(a.link_hybridsync)
        cfg += ["-DCMAKE_PREFIX_PATH=" + hs,
                "-DCMAKE_PROJECT_INCLUDE=" + os.path.join(HERE, "gromacs-link.cmake")]
    cfg += ["-D" + d for d in a.define]
    run.run(cfg)
    run.run(["cmake", "--build", build, "-j", str(a.jobs)])
    run.run(["cmake", "--install", build, "--strip"])
    run.run(["tar", "-cJf", os.path.join(out, "gmx.tar.xz"), "-C", prefix,
             "bin/gmx", "share/gromacs/top"])


# --- input ------------------------------------------------------------------

def cmd_input(a, run):
    gmx = a.gmx if a.dry_run else find_gmx(a.gmx)
    if not 3 <= a.box <= 20:
        raise Failure("--box %g: want 3 to 20 nm (PME with a 1 nm cut-off needs 3)" % a.box)
    out = os.path.abspath(a.out)
    if not a.dry_run:
        os.makedirs(out, exist_ok=True)
    b = "%g" % a.box
    run.run([gmx, "solvate", "-cs", "spc216.gro", "-box", b, b, b, "-o", "solvated.gro"], cwd=out)
    waters = 0 if a.dry_run else count_waters(os.path.join(out, "solvated.gro"))
    files = {"topol.top": TOPOLOGY.format(box=b, waters=waters), "em.mdp": MDP_EM, "md.mdp": MDP_MD}
    for name, text in files.items():
        if a.dry_run:
            print("write %s" % os.path.join(out, name))
        else:
            with open(os.path.join(out, name), "w") as f:
                f.write(text)
    run.run([gmx, "grompp", "-f", "em.mdp", "-c", "solvated.gro", "-p", "topol.top", "-o", "em.tpr"], cwd=out)
    run.run([gmx, "mdrun", "-s", "em.tpr", "-deffnm", "em", "-ntmpi", "1", "-ntomp", str(a.threads),
             "-nb", "cpu", "-pme", "cpu"], cwd=out)
    run.run([gmx, "grompp", "-f", "md.mdp", "-c", "em.gro", "-p", "topol.top", "-o", "topol.tpr"], cwd=out)


def count_waters(gro):
    """The number of SOL molecules in a .gro file (three atoms each)."""
    with open(gro) as f:
        lines = f.read().splitlines()
    try:
        atoms = int(lines[1])
    except (IndexError, ValueError):
        raise Failure("%s: not a .gro file (no atom count on line 2)" % gro)
    sol = sum(1 for l in lines[2:2 + atoms] if l[5:10].strip() == "SOL")
    if sol == 0 or sol % 3:
        raise Failure("%s: %d SOL atoms, want a positive multiple of 3" % (gro, sol))
    return sol // 3


# --- mdrun (the suite program) ----------------------------------------------

def mdrun_argv(gmx, tpr, work, update, steps, seconds, ntomp=1):
    argv = [gmx, "mdrun", "-s", tpr, "-deffnm", os.path.join(work, "md"),
            "-ntmpi", "1", "-ntomp", str(ntomp), "-nb", "gpu", "-pme", "gpu", "-update", update,
            "-pin", "off", "-notunepme", "-noconfout", "-resethway"]
    if steps > 0:
        argv += ["-nsteps", str(steps)]
    else:
        # -maxh stops mdrun at 99% of it; counting from mdrun's start.
        argv += ["-nsteps", "-1", "-maxh", "%.6f" % (seconds / 3600)]
    return argv


def proc_cpu_s(pid):
    """CPU seconds (user + system, all threads) of a live process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cmd_mdrun(a, run):
    given = a.gmx
    if a.linked:
        given = os.environ.get("GMX_LINKED")
        if not given:
            raise Failure("--linked: GMX_LINKED is not set (the gmx of `gromacs.py build --link-hybridsync`)")
    gmx = find_gmx(given) if not a.dry_run else (given or "gmx")
    if not a.dry_run and not os.path.isfile(a.tpr):
        raise Failure("--tpr %s: no such file (make it with `gromacs.py input`)" % a.tpr)
    if a.steps <= 0 and a.seconds <= 0:
        raise Failure("--seconds or --steps must be positive")
    if not 1 <= a.ntomp <= 256:
        raise Failure("--ntomp %d: want 1 to 256 OpenMP threads" % a.ntomp)
    if a.dry_run:
        print(shlex.join(mdrun_argv(gmx, os.path.abspath(a.tpr), "WORK", a.update, a.steps, a.seconds, a.ntomp)))
        return
    work = tempfile.mkdtemp(prefix="gmx-md-")
    argv = mdrun_argv(gmx, os.path.abspath(a.tpr), work, a.update, a.steps, a.seconds, a.ntomp)
    env = dict(os.environ, GMX_MAXBACKUP="-1")
    if a.linked:
        # A program that links the library keeps its own CUDA calls
        # unless told to hand them over (docs/gromacs.md).
        env.setdefault("HYBRIDSYNC_INTERPOSE", "1")
    try:
        with open(os.path.join(work, "mdrun.out"), "w") as out:
            p = subprocess.Popen(argv, cwd=work, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
            cpu, tail = watch(p)
            p.wait()
        if p.returncode != 0:
            sys.stderr.write("".join(tail))
            raise Failure("gmx mdrun exited %d" % p.returncode)
        if "reset" not in cpu:
            raise Failure("gmx mdrun ended before it reset its counters: give more --seconds or --steps")
        if "end" not in cpu:
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu["end"] = usage.ru_utime + usage.ru_stime
        with open(os.path.join(work, "md.log")) as f:
            text = f.read()
        if a.log:
            with open(a.log, "w") as f:
                f.write(text)
        res = parse_log(text, a.update)
        res["cpu_s"] = round(cpu["end"] - cpu["reset"], 6)
        res["program"] = a.name
        print(json.dumps(res, sort_keys=True), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def watch(p):
    """Reads mdrun's stderr (unbuffered, unlike its log) until it ends:
    says ready when its steps start, and takes its CPU seconds when it
    resets its counters ("reset") and when it reports its performance
    ("end": the steps are over, the tear-down is not counted). Returns
    those it saw and the last lines, for an error message."""
    cpu, tail = {}, []
    for line in p.stderr:
        tail = (tail + [line])[-40:]
        mark = None
        if line.startswith("starting mdrun "):
            print("apps: ready", file=sys.stderr, flush=True)
        elif "reset" not in cpu and RESET_RE.search(line):
            mark = "reset"
        elif "reset" in cpu and "end" not in cpu and PERF_RE.search(line):
            mark = "end"
        if mark:
            try:
                cpu[mark] = proc_cpu_s(p.pid)
            except (FileNotFoundError, ProcessLookupError):
                pass
    return cpu, tail


# --- log parsing ------------------------------------------------------------

RESET_RE = re.compile(r"^\s*step (\d+): resetting all time and cycle counters", re.M)
TIME_RE = re.compile(r"^\s*Time:\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", re.M)
PERF_RE = re.compile(r"^Performance:\s+([0-9.]+)\s+([0-9.]+)", re.M)
DT_RE = re.compile(r"^\s*dt\s+=\s+([0-9.eE+-]+)", re.M)
# A row of the accounting table: the activity, ranks, threads, calls, wall
# seconds.
ROW_RE = re.compile(r"^ ([A-Z][A-Za-z/. ]*?)\s+\d+\s+\d+\s+\d+\s+([0-9.]+)\s", re.M)
# The rows that gauge the CPU's speed (host_s), by where the update runs:
# CPU-side work with no wait inside its timer.
HOST_ROWS = {"cpu": ("Update", "Constraints"), "gpu": ("Neighbor search",)}


def parse_log(text, update="cpu"):
    """The performance of an mdrun log: ns/day, the wall seconds and steps
    its counters cover (after a reset, the steps since it). Raises Failure
    naming what is missing."""
    perf, tm, dt = PERF_RE.search(text), TIME_RE.search(text), DT_RE.search(text)
    if not (perf and tm and dt):
        missing = [n for n, m in (("Performance:", perf), ("Time:", tm), ("dt", dt)) if not m]
        raise Failure("mdrun log: no %s line (did mdrun finish?)" % " / ".join(missing))
    ns_day, wall, dt_ps = float(perf.group(1)), float(tm.group(2)), float(dt.group(1))
    if ns_day <= 0 or wall <= 0 or dt_ps <= 0:
        raise Failure("mdrun log: ns/day %g, wall %g s, dt %g ps: want them positive" % (ns_day, wall, dt_ps))
    # The steps the counters cover, from the rate mdrun reports; mdrun's
    # ns/day is rounded to 3-4 digits, so the count is good to about 0.1%.
    steps = round(ns_day * wall / 86400 / (dt_ps * 1e-3))
    reset = RESET_RE.search(text)
    host = sum(float(m.group(2)) for m in ROW_RE.finditer(text) if m.group(1) in HOST_ROWS[update])
    return {"steps": steps, "wall_s": wall, "ns_per_day": ns_day,
            "reset_step": int(reset.group(1)) if reset else 0, "host_s": round(host, 6)}


def cmd_parse(a, run):
    try:
        with open(a.log) as f:
            text = f.read()
    except OSError as e:
        raise Failure("%s: %s" % (a.log, e.strerror))
    print(json.dumps(parse_log(text, a.update), sort_keys=True))


def main(argv=None):
    p = argparse.ArgumentParser(prog="gromacs.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build GROMACS with CUDA and pack gmx")
    b.add_argument("--source", required=True, help="GROMACS source tree")
    b.add_argument("--out", required=True, help="install and pack here")
    b.add_argument("--build", help="build directory (default OUT/build)")
    b.add_argument("--cuda-arch", default="90", help="CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200)")
    b.add_argument("--simd", help="GMX_SIMD (default: what the build machine supports)")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    b.add_argument("--link-hybridsync", metavar="PREFIX", help="link libhybridsync installed under PREFIX")
    b.add_argument("-D", dest="define", action="append", default=[], metavar="VAR=VALUE",
                   help="another CMake definition")
    i = sub.add_parser("input", help="make an SPC/E water box and its topol.tpr")
    i.add_argument("--gmx")
    i.add_argument("--out", required=True)
    i.add_argument("--box", type=float, default=5.0, help="box edge in nm (default 5)")
    i.add_argument("--threads", type=int, default=4, help="OpenMP threads of the minimisation")
    m = sub.add_parser("mdrun", help="run mdrun as a suite program")
    m.add_argument("--gmx")
    m.add_argument("--linked", action="store_true",
                   help="run the gmx that links libhybridsync, named by GMX_LINKED, with HYBRIDSYNC_INTERPOSE=1")
    m.add_argument("--log", help="keep mdrun's log here")
    m.add_argument("--tpr", required=True)
    m.add_argument("--update", choices=["cpu", "gpu"], default="cpu")
    m.add_argument("--name", default="gromacs", help="program name in the result line")
    m.add_argument("--seconds", type=float, default=10)
    m.add_argument("--steps", type=int, default=0)
    m.add_argument("--ntomp", type=int, default=1, help="OpenMP threads of mdrun (default 1); they share the CPUs the program may use")
    r = sub.add_parser("parse", help="print the performance of an mdrun log")
    r.add_argument("log")
    r.add_argument("--update", choices=["cpu", "gpu"], default="cpu", help="where the run's update ran (for host_s)")
    for s in (b, i, m):
        s.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    a = p.parse_args(argv)
    run = Runner(getattr(a, "dry_run", False))
    try:
        {"build": cmd_build, "input": cmd_input, "mdrun": cmd_mdrun, "parse": cmd_parse}[a.cmd](a, run)
    except Failure as e:
        print("gromacs.py %s: %s" % (a.cmd, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
