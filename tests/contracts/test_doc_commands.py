"""Every shell command in README.md and docs/*.md, run as written where a CPU can run it.

The commands are the lines of the docs' ```bash (sh, shell, console) blocks, `\\` continuations joined
(tools/check_docs.shell_commands). A block that cannot run on a CPU says why in an HTML comment on the
line above its fence, `<!-- gpu -->`, `<!-- container network -->`: one or more words of MARKS. Every
other command runs here:

- on a page in SCRIPTS, its unmarked blocks run top to bottom as one bash script, as a reader pastes
  them (docs/kubernetes.md with `kubectl` replaced by tests/kubectl_check.py, a check of the manifests
  it applies);
- elsewhere each command is in RUN (how it is run and what it must show) or in STATE (a shell line whose
  effect the block's later commands carry), and a command the docs gain that is in neither fails
  test_every_doc_command_runs_or_its_block_is_marked. The count of marked blocks per page is
  MARKED_BLOCKS, so a block cannot slip out of the run by gaining a mark.

How a command runs: through bash, its text as written (comments included), in a fresh folder (the
`ws` fixture) where `effbench` on PATH and `.venv/bin/...` are this checkout's, and `benchmarks/`,
`tools/` and `entrypoint/` are the repository's. What a command needs that the docs assume exists (a
run folder under the name the command uses, ci/baseline.json, a sweep folder) is made by its
Spec.setup before it runs. The only rewrites are the ones in SUBSTITUTIONS, each with its reason.
`effbench` is this venv's console script (or pip's form of it where the venv's lacks the `__main__`
guard: effbench_bin). The smoke run of the README's CI block runs once per session; the commands that
read a run folder get copies of its folder. A command over ~30 s on 2 loaded cores is marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import check_docs  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def doc_commands() -> list[check_docs.Command]:
    return [
        cmd
        for path in check_docs.doc_files()
        for block in check_docs.code_blocks(path)
        if block.lang in check_docs.SHELL_LANGS
        for cmd in check_docs.shell_commands(block)
    ]


def page(path: Path) -> str:
    return check_docs.shown(path)


def run_here() -> list[check_docs.Command]:
    """The commands RUN and STATE answer for: unmarked, on no page of SCRIPTS."""
    return [c for c in doc_commands() if not c.marks and page(c.path) not in SCRIPTS]


def places(key: str) -> list[check_docs.Command]:
    return [c for c in run_here() if c.key == key]


# ---------------------------------------------------------------------------------------------------------
# Why a block cannot run here: the words a `<!-- ... -->` line above a block may hold.
MARKS: dict[str, str] = {
    "gpu": "needs an NVIDIA GPU",
    "container": "builds or runs a container image (no docker/apptainer/singularity engine on the test machine)",
    "cluster": "submits to a cluster (Slurm, enroot) that the test machine is not",
    "network": "needs the network (a download, a package index, a registry)",
    "dataset": "needs a real dataset on disk (CIFAR, Food-101) and hours on a CPU",
    "setup": "makes the environment or runs the test suite, which this test runs inside",
    "server": "starts or needs an MLflow server on a fixed port (tests/e2e/test_tracking.py runs these against "
    "one it starts on a free port)",
}

# The marked shell blocks of each page: a block that gains or loses a mark changes what the docs test runs,
# so the count is stated here. Pages not named have none.
MARKED_BLOCKS: dict[str, int] = {
    "README.md": 4,
    "docs/PERFORMANCE.md": 1,
    "docs/performance-history.md": 1,
    "docs/containers.md": 10,
    "docs/dali.md": 1,
    "docs/distributed.md": 1,
    "docs/getting-started.md": 5,
    "docs/kubernetes.md": 2,
    "docs/selftest.md": 1,
    "docs/sweeps-and-reports.md": 1,
    "docs/testing.md": 1,
    "docs/tracking.md": 2,
    "docs/troubleshooting.md": 5,
}

# Shell lines run for their effect on the lines after them in the block (STATE): whenever a later command of
# the block runs after them (as a script would), so they are run, not skipped.
STATE: dict[str, str] = {
    "set -e": "the block is a script: stop at the first failure",
    "run=$(ls -d ci-out/*/ | tail -n 1)": "the newest run folder, read by the compare after it",
}

# The one rewrite of a command's text: an absolute path outside the test's folder.
SUBSTITUTIONS: dict[str, dict[str, str]] = {
    "effbench selftest --device cpu --output /tmp/st --only flops,precision,ddp,data": {"/tmp/st": "st"},
    "OMP_WAIT_POLICY=PASSIVE effbench selftest --device cpu --output /tmp/st --only harness": {"/tmp/st": "st"},
}

SMOKE = "effbench run --smoke --seed 0 --max-steps 30 --warmup-steps 5 --repeats 5 --no-profile --quiet --output ci-out"
GRID_SWEEP = "effbench sweep --smoke --batch-size 16,32 --optimizer sgd,adam --quiet"


# ---------------------------------------------------------------------------------------------------------
@dataclass
class Done:
    """What a command left: its exit status, its output, the folder it ran in."""

    rc: int
    out: str
    err: str
    cwd: Path


@dataclass(frozen=True)
class Spec:
    """How one documented command is run: what its folder must hold first, and what it must show.

    rc: the exit status the doc implies. shows: lines (regular expressions, multiline) its stdout must
    hold. check: a further check on what it left. smoke / sweep: the folder needs the session's smoke run
    / grid sweep (setup gets it as `made`)."""

    rc: int = 0
    shows: tuple[str, ...] = ()
    setup: Callable[[Path, Path | None], None] | None = None
    check: Callable[[Done], None] | None = None
    smoke: bool = False
    sweep: bool = False
    slow: bool = False
    timeout: int = 300


# What `effbench doctor` shows at any load: a row for every check it runs on a CPU machine, and a last line that
# says no check failed. On a machine busier than its cores (a loaded test machine) that line names the load
# instead of "all checks passed": both are right, and which one a test sees depends on the machine, not the code.
DOCTOR_ROWS = tuple(rf"^{check}\s+(ok|WARN)\s" for check in ("output", "home", "shm", "memory", "torch", "gpu", "load"))
DOCTOR_VERDICT = (
    r"^doctor: (all checks passed \(\d+ warning\(s\)\)$|no check failed, but figures measured now would be wrong: load)"
)


def place(*dests: str, baseline: bool = False, git: bool = False) -> Callable[[Path, Path | None], None]:
    """Setup: copies of the session's smoke run folder (or grid sweep folder) at `dests`; with `baseline`
    its results.json as ci/baseline.json (what the README's baseline block makes); with `git` the folder is
    a git repository, as the reader's checkout is."""

    def setup(ws: Path, made: Path | None) -> None:
        assert made is not None
        for dest in dests:
            shutil.copytree(made, ws / dest)
        if baseline:
            (ws / "ci").mkdir()
            shutil.copy(made / "results.json", ws / "ci" / "baseline.json")
        if git:
            subprocess.run(["git", "init", "-q", str(ws)], check=True)

    return setup


def csv_rows(n: int) -> Callable[[Done], None]:
    def check(done: Done) -> None:
        lines = (done.cwd / "runs.csv").read_text().splitlines()
        assert len(lines) == 1 + n, lines[:3]
        assert "throughput_img_s" in lines[0].split(",")

    return check


def jsonl_rows(done: Done) -> None:
    rows = [json.loads(line) for line in done.out.splitlines() if line.strip()]
    assert len(rows) == 2 and all(r["throughput_img_s"] > 0 for r in rows), rows


def report_written(folder: str) -> Callable[[Done], None]:
    def check(done: Done) -> None:
        assert (done.cwd / folder / "report.html").stat().st_size > 0

    return check


def baseline_made(done: Done) -> None:
    """The README's baseline block: ci/baseline.json is the run's results.json, staged in git."""
    record = json.loads((done.cwd / "ci" / "baseline.json").read_text())
    assert record["status"] == "ok" and record["throughput_img_s"] > 0
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=done.cwd, capture_output=True, text=True)
    assert staged.stdout.split() == ["ci/baseline.json"]


PASS_GATE = (r"PASS",)

RUN: dict[str, Spec] = {
    # README.md: the CI blocks (their smoke run is the session's one)
    SMOKE: Spec(smoke=True, shows=(r"^status ok$", r"^report: ci-out/.*/report.txt$")),
    'mkdir -p ci && cp "$run/results.json" ci/baseline.json && git add ci/baseline.json': Spec(
        smoke=True, setup=place("ci-out/run", git=True), check=baseline_made
    ),
    'effbench compare ci/baseline.json "$run" --fail-if-slower 10 --fail-if-less-accurate 2': Spec(
        smoke=True, setup=place("ci-out/run", baseline=True), shows=PASS_GATE
    ),
    # README.md: the commands one line each
    "effbench report results/sweep-workers": Spec(
        sweep=True, slow=True, setup=place("results/sweep-workers"), check=report_written("results/sweep-workers")
    ),
    "effbench compare results/runA results/runB": Spec(
        smoke=True,
        setup=place("results/runA", "results/runB"),
        shows=(r"^A: results/runA$", r"^B: results/runB$", r"^throughput \(img/s\) .*\+0\.0% .* within noise$"),
    ),
    "effbench export results/ -o runs.csv": Spec(
        smoke=True, setup=place("results/runA", "results/runB"), check=csv_rows(2)
    ),
    "effbench selftest": Spec(slow=True, timeout=600, shows=(r"PASS",)),
    "effbench doctor": Spec(shows=(r"^GPUs visible\s+0$", *DOCTOR_ROWS, DOCTOR_VERDICT)),
    "effbench models": Spec(shows=(r"^efficientnet-b0\s+effbench", r"^89 architectures")),
    "effbench datasets": Spec(shows=(r"^datasets under --data-dir data ", r"^cifar100 \(cifar\)\s+missing")),
    # docs/PERFORMANCE.md and docs/performance-history.md: the benchmarks as measured on this 2-core machine
    ".venv/bin/python benchmarks/harness_overhead.py --rounds 7": Spec(slow=True, timeout=1800),
    ".venv/bin/python benchmarks/until_sweep.py --json until_sweep.json": Spec(
        slow=True, timeout=5400, shows=(r"^\| device time at ci:2%, fixed / until ",)
    ),
    "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/until_sweep.py --json until_sweep.json": Spec(
        slow=True, timeout=7200, shows=(r"^\| device time at ci:2%, fixed / until ",)
    ),
    ".venv/bin/python benchmarks/rounds_agreement.py --json rounds.json --keep runs/": Spec(
        slow=True, timeout=5400, shows=(r"^\| configurations whose reference is inside the across-rounds interval ",)
    ),
    ".venv/bin/python benchmarks/cifar_loader.py": Spec(slow=True, timeout=1800),
    ".venv/bin/python benchmarks/food_loader.py": Spec(slow=True, timeout=1800),
    ".venv/bin/python benchmarks/smoke_e2e.py": Spec(slow=True, timeout=600),
    ".venv/bin/python benchmarks/profiler_overhead.py": Spec(slow=True, timeout=1800),
    "effbench selftest --device cpu --output /tmp/st --only flops,precision,ddp,data": Spec(
        slow=True, timeout=600, shows=(r"PASS",)
    ),
    "OMP_WAIT_POLICY=PASSIVE effbench selftest --device cpu --output /tmp/st --only harness": Spec(
        slow=True, timeout=600, shows=(r"PASS|SKIP",)
    ),
    # docs/datasets.md
    "effbench datasets --data-dir /mnt/data": Spec(shows=(r"^datasets under --data-dir /mnt/data ",)),
    # docs/distributed.md: two CPU processes under torchrun
    "effbench run --device cpu --nproc 1,2 --dataset synthetic --arch b0 --image-size 32 --max-steps 20 "
    "--weights none": Spec(slow=True, timeout=900),
    # docs/getting-started.md
    # the run `make run` makes: the README's sample report is its output
    ".venv/bin/effbench run --smoke": Spec(
        slow=True, timeout=600, check=lambda d: assert_sample_matches(d.out, STEADY + ("dataset",))
    ),
    'ls "$(ls -d results/*/ | tail -n 1)"': Spec(
        smoke=True, setup=place("results/run"), shows=(r"^results\.json$", r"^report\.html$", r"^steps\.csv$")
    ),
    "effbench models --source timm --json": Spec(slow=True, check=lambda d: assert_count(d.out, 1371)),
    # docs/roofline.md
    "effbench run --arch b0 --dataset synthetic --weights none --image-size 64 --batch-size 16 --max-steps 6 --epochs 1": Spec(
        slow=True,
        timeout=900,
        shows=(r"^Where the step's time goes, against this machine's roofs$", r"could be at most"),
    ),
    "effbench sweep --channels-last off,on --arch b0 --dataset synthetic --weights none --image-size 64 "
    "--batch-size 16 --max-steps 6 --epochs 1 --device cpu": Spec(
        slow=True, timeout=1200, shows=(r"^kinds whose time moved most",)
    ),
    "effbench selftest --device cpu --only roofs,roofline": Spec(slow=True, timeout=600, shows=(r"PASS",)),
    "effbench run --arch resnet50 --dataset synthetic --image-size 64 --batch-size 16 --epochs 1 --max-steps 6 --no-profile --quiet": Spec(
        slow=True, timeout=900, shows=(r"^arch\s+torchvision:resnet50$", r"^status\s+ok$")
    ),
    # docs/selftest.md
    "effbench selftest --device cpu --only flops": Spec(shows=(r"^FLOPs: depthwise net\s+PASS", r"^selftest.json: ")),
    "effbench selftest --device cpu": Spec(slow=True, timeout=600, shows=(r"PASS", r"SKIP")),
    # docs/sweeps-and-reports.md
    GRID_SWEEP: Spec(sweep=True, slow=True),
    # docs/troubleshooting.md: steadier figures on a VM whose host shares its cores
    "OMP_NUM_THREADS=1 effbench sweep --arch resnet18 --batch-size 8,16 --image-size 32 --dataset synthetic "
    "--weights none --device cpu --until ci:2% --epochs 1 --max-steps 300 --rounds 3": Spec(
        slow=True, timeout=1800, shows=(r"^Across rounds$",)
    ),
    "effbench sweep --smoke --batch-size 4,8 --rounds 3 --quiet": Spec(
        slow=True,
        shows=(
            r"^Across rounds$",
            r"^- across rounds, a configuration's img/s moved by up to",
            r"^4 +3 of 3 ",
            r"^8 +3 of 3 ",
        ),
    ),
    "effbench report results/sweep-optimizers": Spec(
        sweep=True,
        slow=True,
        setup=place("results/sweep-optimizers"),
        check=report_written("results/sweep-optimizers"),
    ),
    "effbench report results/20261122-081500_resnet18_cifar10_cpu_fp32_bs128": Spec(
        smoke=True,
        setup=place("results/20261122-081500_resnet18_cifar10_cpu_fp32_bs128"),
        check=report_written("results/20261122-081500_resnet18_cifar10_cpu_fp32_bs128"),
    ),
    "effbench compare results/sweep-a results/sweep-b": Spec(
        sweep=True,
        slow=True,
        setup=place("results/sweep-a", "results/sweep-b"),
    ),
    "effbench compare 20261125-0612 latest": Spec(
        smoke=True,
        setup=place(
            "results/20261125-061200_efficientnet-b0_synthetic_cpu_fp32_bs16",
            "results/20261125-093000_efficientnet-b0_synthetic_cpu_fp32_bs16",
        ),
        shows=(r"^A: results/20261125-061200_", r"^B: results/20261125-093000_"),  # latest: the newest
    ),
    "effbench report latest": Spec(
        smoke=True,
        setup=place("results/20261125-093000_efficientnet-b0_synthetic_cpu_fp32_bs16"),
        shows=(r"^run results/20261125-093000_\S+: wrote \d+ files$",),  # latest: the one run there
    ),
    "effbench export results/ nodes/ --format jsonl": Spec(
        smoke=True, setup=place("results/runA", "nodes/runB"), check=jsonl_rows
    ),
    "effbench report results/cluster-week-47": Spec(
        smoke=True,
        setup=place("results/cluster-week-47/node1", "results/cluster-week-47/node2"),
        shows=(r"^effbench leaderboard cluster-week-47$", r" node2 +ok .* within noise"),
        check=report_written("results/cluster-week-47"),
    ),
    "effbench compare ci/baseline.json results/run --fail-if-slower 5 --fail-if-less-accurate 2": Spec(
        smoke=True, setup=place("results/run", baseline=True), shows=PASS_GATE
    ),
    # docs/troubleshooting.md
    "effbench run --smoke --quiet --omp-wait-policy passive": Spec(slow=True, shows=(r"^status\s+ok$",), timeout=600),
    "uptime": Spec(shows=(r"load average",)),
    "taskset -c 0,1 effbench run --smoke --quiet": Spec(slow=True, shows=(r"^status\s+ok$",), timeout=600),
    "df -h /dev/shm": Spec(shows=(r"/dev/shm$",)),
    "effbench doctor --workers 4 --batch-size 256": Spec(
        shows=(r"^shm\s+ok\s+/dev/shm has .* free; 4 DataLoader workers x batch 256", *DOCTOR_ROWS, DOCTOR_VERDICT)
    ),
    "effbench datasets --data-dir ./data": Spec(shows=(r"^datasets under --data-dir data ",)),
    # docs/tracking.md: no server, a SQLite file (MLflow's SQL store: sqlalchemy, alembic in the test extra)
    "effbench track results/ --track sqlite:///mlflow.db": Spec(
        smoke=True,
        setup=place("results/run"),
        shows=(r"^tracked: 1 run \(1 new\) in experiment 'effbench': sqlite:///mlflow.db$",),
    ),
}


# ---------------------------------------------------------------------------------------------------------
# Pages run top to bottom as one script (their unmarked blocks, in order), as a reader pastes them.
@dataclass(frozen=True)
class Script:
    """setup: what the page's marked blocks would have left (a download), made by hand. replace: the rewrites
    of the script's text, each with its reason in a comment. env: extra environment. shows: lines (regular
    expressions) its stdout must hold. check: a further check on the folder it ran in."""

    setup: Callable[[Path], None] | None = None
    replace: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    shows: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None
    slow: bool = False
    timeout: int = 300


K8S_IMAGE = "test.example/effbench:doc-test"


def cifar_download(ws: Path) -> None:
    """What the page's marked download block leaves: data/cifar-100-python/ (empty files will do for kubectl cp)."""
    folder = ws / "data" / "cifar-100-python"
    folder.mkdir(parents=True)
    for name in ("meta", "test", "train"):
        (folder / name).write_bytes(b"")


def k8s_left_the_claims(ws: Path) -> None:
    """After the page: the claims stay with the results; the pod and the jobs were deleted; results fetched."""
    state = json.loads((ws / ".kubectl-check.json").read_text())
    assert sorted((o["kind"], o["metadata"]["name"]) for o in state) == [
        ("PersistentVolumeClaim", "datasets"),
        ("PersistentVolumeClaim", "effbench-results"),
    ]
    assert (ws / "k8s-results").is_dir()


SCRIPTS: dict[str, Script] = {
    "docs/kubernetes.md": Script(
        setup=cifar_download,
        # the image the page names is the reader's to choose; a distinct one proves every manifest gets it
        replace={"IMAGE=registry.example.org/effbench:latest": f"IMAGE={K8S_IMAGE}"},
        env={"KUBECTL_CHECK_IMAGE": K8S_IMAGE},
        check=k8s_left_the_claims,
    ),
    "docs/recipes.md": Script(
        shows=(r'^\s*"steps": "imagenet: resize shorter side 18, center square 18, random-resized crop 16',)
    ),
    "docs/dali.md": Script(
        shows=(r"^loader / workers\s+dali / 2$", r"^data path: fast vs dali\s+PASS"), slow=True, timeout=600
    ),
    "docs/time-to-accuracy.md": Script(
        shows=(
            r"^digits: 1438 train and 359 val images",
            r"^time to accuracy\s+[\d.]+ s training .* to val top-1 >= 0.9, run stopped there$",
            r"^- shortest training time to val top-1 >= 0.9 along batch-size: ",
        ),
        slow=True,
        timeout=1800,
    ),
}


def assert_count(out: str, n: int) -> None:
    assert len(json.loads(out)) == n


# ---------------------------------------------------------------------------------------------------------
def workspace(folder: Path) -> Path:
    """A fresh folder as a reader's checkout looks from its root: .venv/ (this one), and the repository's
    benchmarks/, tools/ and entrypoint/."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".venv").symlink_to(VENV_BIN.parent)
    for name in ("benchmarks", "tools", "entrypoint"):
        (folder / name).symlink_to(ROOT / name)
    return folder


# A console script of the shape pip writes (distlib's ScriptMaker template, less its argv[0] cleanup). The guard:
# selftest's all-reduce starts ranks with multiprocessing's "spawn", which runs the parent's script again
# as __mp_main__; without the guard each rank runs the whole CLI and exits 1.
CONSOLE_SCRIPT = """#!{python}
import sys
from effbench.__main__ import main
if __name__ == "__main__":
    sys.exit(main())
"""


def effbench_bin(ws: Path) -> Path:
    """The folder whose `effbench` the commands run: this venv's, or where its script lacks pip's
    `__main__` guard (a venv assembled by hand, as on the shared development machine), pip's script."""
    script = VENV_BIN / "effbench"
    if script.exists() and "__main__" in script.read_text():
        return VENV_BIN
    shim = ws / ".effbench-bin"
    shim.mkdir(exist_ok=True)
    (shim / "effbench").write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    (shim / "effbench").chmod(0o755)
    return shim


def run_doc_command(key: str, ws: Path, timeout: int) -> Done:
    """The command's text as written (less SUBSTITUTIONS), after its block's earlier STATE lines, in bash."""
    cmd = places(key)[0]
    text = cmd.text
    for old, new in SUBSTITUTIONS.get(key, {}).items():
        assert old in text, f"substitution {old!r} no longer applies to {key!r}"
        text = text.replace(old, new)
    # the block's earlier commands: STATE lines run again first; what the others made, setup provides
    state = [c.text for c in doc_commands() if (c.path, c.block) == (cmd.path, cmd.block) and c.line < cmd.line]
    state = [line for line in state if check_docs.strip_comment(line).strip() in STATE]
    return run_bash("\n".join([*state, text]), ws, timeout)


def run_bash(
    script: str, ws: Path, timeout: int, env: dict[str, str] | None = None, bins: tuple[Path, ...] = ()
) -> Done:
    """`script` in bash in `ws`, with this checkout's `effbench` (and `bins`) first on PATH."""
    path = os.pathsep.join([*map(str, bins), str(effbench_bin(ws)), str(VENV_BIN), os.environ.get("PATH", "")])
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=ws,
        env={**os.environ, **(env or {}), "PATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(proc.returncode, proc.stdout, proc.stderr, ws)


@pytest.fixture(scope="session")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Done, Path]:
    """The README's CI smoke run, run once as written; its run folder is copied by the commands that read one."""
    ws = workspace(tmp_path_factory.mktemp("smoke"))
    done = run_doc_command(SMOKE, ws, timeout=600)
    assert done.rc == 0, done.err[-2000:]
    (run_dir,) = (ws / "ci-out").iterdir()
    return done, run_dir


@pytest.fixture(scope="session")
def grid_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Done, Path]:
    """sweeps-and-reports.md's own grid, run once as written; its folder stands in for the docs' named sweeps."""
    ws = workspace(tmp_path_factory.mktemp("sweep"))
    done = run_doc_command(GRID_SWEEP, ws, timeout=900)
    assert done.rc == 0, done.err[-2000:]
    (sweep_dir,) = (ws / "results").iterdir()
    return done, sweep_dir


def case_id(key: str) -> str:
    return "+".join(f"{page(c.path)}:{c.line}" for c in places(key))


def cases() -> list:
    keys = dict.fromkeys(c.key for c in run_here() if c.key in RUN)
    # pytest-timeout's 300 s (pyproject) would end a longer command before its own timeout could
    return [
        pytest.param(
            key,
            id=case_id(key),
            marks=[
                *([pytest.mark.slow] if RUN[key].slow else []),
                pytest.mark.timeout(max(300, RUN[key].timeout + 60)),
            ],
        )
        for key in keys
    ]


def test_every_doc_command_runs_or_its_block_is_marked():
    found = {c.key: c for c in run_here()}
    unknown = [f"{page(c.path)}:{c.line}: {k}" for k, c in found.items() if k not in RUN and k not in STATE]
    assert unknown == [], "a documented command is neither run (RUN, STATE) nor in a block marked <!-- why -->"
    assert set(RUN) & set(STATE) == set()
    stale = sorted(k for k in [*RUN, *STATE, *SUBSTITUTIONS] if k not in found)
    assert stale == [], "these table entries name commands no unmarked block holds any more"


def shell_blocks(path: Path) -> list[check_docs.Block]:
    return [b for b in check_docs.code_blocks(path) if b.lang in check_docs.SHELL_LANGS]


def test_the_marked_blocks_are_the_expected_ones_and_say_why():
    """Each page's count of blocks not run here is what MARKED_BLOCKS says, and each mark is a known reason."""
    marked = {page(p): [b for b in shell_blocks(p) if b.marks] for p in check_docs.doc_files()}
    assert {p: len(bs) for p, bs in marked.items() if bs} == MARKED_BLOCKS
    unknown = [f"{p}:{b.line}: {w}" for p, bs in marked.items() for b in bs for w in b.marks if w not in MARKS]
    assert unknown == [], f"a mark names none of {sorted(MARKS)}"
    # a mark on a block that is not shell would hide nothing: it is a mistake
    stray = [
        f"{page(p)}:{b.line}" for p in check_docs.doc_files() for b in check_docs.code_blocks(p)
        if b.marks and b.lang not in check_docs.SHELL_LANGS
    ]  # fmt: skip
    assert stray == []


def test_the_recipe_pages_run_every_block_a_cpu_can():
    """getting-started, kubernetes, time-to-accuracy and the README's CI blocks: nothing is left out but the
    marked blocks (a GPU, a container engine, a cluster, the network, a real dataset, the set-up itself)."""
    ci_blocks = [b for b in shell_blocks(ROOT / "README.md") if any("ci-out" in line for line in b.lines)]
    assert len(ci_blocks) == 2 and not any(b.marks for b in ci_blocks)  # the baseline, then the gate
    for name in ("docs/getting-started.md", "docs/kubernetes.md", "docs/time-to-accuracy.md"):
        blocks = shell_blocks(ROOT / name)
        runs = [b for b in blocks if not b.marks]
        assert runs, name
        assert len(blocks) - len(runs) == MARKED_BLOCKS.get(name, 0)


def test_the_extractor_joins_continuations_drops_comments_and_reads_marks(tmp_path):
    page_md = tmp_path / "p.md"
    page_md.write_text(
        "```bash\n# a comment line\neffbench run --a 1 \\\n    --b 2   # what it does\n\n"
        "echo '# not a comment' \"x # y\" # gone\n```\n```text\neffbench not-a-command\n```\n"
        "<!-- gpu network -->\n```bash\nnvidia-smi\n```\n<!-- gpu -->\n\n```bash\nnot-marked\n```\n"
    )
    blocks = check_docs.code_blocks(page_md)
    # a mark is the line just above the fence: one with a blank line between marks nothing
    assert [(b.lang, b.line, b.marks) for b in blocks] == [
        ("bash", 1, ()), ("text", 8, ()), ("bash", 12, ("gpu", "network")), ("bash", 17, ())
    ]  # fmt: skip
    cmds = check_docs.shell_commands(blocks[0])
    assert [(c.line, c.key) for c in cmds] == [(3, "effbench run --a 1 --b 2"), (6, "echo '# not a comment' \"x # y\"")]
    assert check_docs.shell_commands(blocks[2])[0].marks == ("gpu", "network")


def test_every_code_block_names_its_language():
    """A block without one could hold commands this test never sees: shell blocks say bash, the rest text."""
    bare = [f"{page(b.path)}:{b.line}" for p in check_docs.doc_files() for b in check_docs.code_blocks(p) if not b.lang]
    assert bare == []


@pytest.mark.parametrize("key", cases())
def test_doc_command(key, tmp_path, request):
    spec = RUN[key]
    if key == SMOKE:
        done, _ = request.getfixturevalue("smoke")
    elif key == GRID_SWEEP:
        done, _ = request.getfixturevalue("grid_sweep")
    else:
        made = None
        if spec.smoke:
            made = request.getfixturevalue("smoke")[1]
        elif spec.sweep:
            made = request.getfixturevalue("grid_sweep")[1]
        ws = workspace(tmp_path / "ws")
        if spec.setup:
            spec.setup(ws, made)
        done = run_doc_command(key, ws, spec.timeout)
    assert done.rc == spec.rc, f"exit {done.rc}, the doc implies {spec.rc}\n{done.out[-2000:]}\n{done.err[-2000:]}"
    for pattern in spec.shows:
        assert re.search(pattern, done.out, re.M), f"{pattern!r} not in the output:\n{done.out[-3000:]}"
    assert "Traceback" not in done.err
    if spec.check:
        spec.check(done)


# ---------------------------------------------------------------------------------------------------------
# The pages run top to bottom
def page_script(name: str) -> str:
    """The page's unmarked shell blocks, in order, as one script."""
    return "\n".join(c.text for b in shell_blocks(ROOT / name) if not b.marks for c in check_docs.shell_commands(b))


KUBECTL = """#!{python}
import sys
sys.path.insert(0, {tests!r})
import kubectl_check
sys.exit(kubectl_check.main(sys.argv[1:]))
"""


def fake_kubectl(ws: Path) -> Path:
    """A folder whose `kubectl` is tests/kubectl_check.py, its state in the workspace."""
    folder = ws / ".kubectl-bin"
    folder.mkdir()
    (folder / "kubectl").write_text(KUBECTL.format(python=sys.executable, tests=str(ROOT / "tests")))
    (folder / "kubectl").chmod(0o755)
    return folder


def run_script(name: str, script: str, ws: Path, spec: Script) -> Done:
    for old, new in spec.replace.items():
        assert old in script, f"{name}: the rewrite of {old!r} no longer applies"
        script = script.replace(old, new)
    env = {**spec.env, "KUBECTL_CHECK_STATE": str(ws / ".kubectl-check.json")}
    return run_bash("set -eo pipefail\n" + script, ws, spec.timeout, env=env, bins=(fake_kubectl(ws),))


@pytest.mark.parametrize(
    "name", [pytest.param(n, id=n, marks=[pytest.mark.slow] if s.slow else []) for n, s in SCRIPTS.items()]
)
def test_the_page_runs_top_to_bottom(name, tmp_path):
    spec = SCRIPTS[name]
    ws = workspace(tmp_path / "ws")
    if spec.setup:
        spec.setup(ws)
    done = run_script(name, page_script(name), ws, spec)
    assert done.rc == 0, f"{name} stopped, exit {done.rc}\n{done.out[-2000:]}\n{done.err[-3000:]}"
    for pattern in spec.shows:
        assert re.search(pattern, done.out, re.M), f"{pattern!r} not in the output:\n{done.out[-3000:]}"
    assert "Traceback" not in done.err
    if spec.check:
        spec.check(ws)


SEDDED_JOB = (
    'sed "s|registry.example.org/effbench:latest|$IMAGE|" entrypoint/kubeflow-pytorchjob.yaml | kubectl apply -f -'
)
CLAIMS = "entrypoint/kubernetes-claims.yaml"


@pytest.mark.parametrize(
    ("manifest", "old", "new", "refusal"),
    [
        # a claim one node only can mount
        (CLAIMS, "accessModes: [ReadWriteMany]   # the pod", "accessModes: [ReadWriteOnce]   # the pod", "is not ReadWriteMany"),
        # a manifest applied as it ships, with the example registry's image
        (None, SEDDED_JOB, "kubectl apply -f entrypoint/kubeflow-pytorchjob.yaml", "not the image the page built"),
        # the claims never created
        (None, f"kubectl apply -f {CLAIMS}\n", "", "was not applied before this command"),
        # a pod name the operator does not make
        (None, "kubectl logs -f effbench-master-0", "kubectl logs -f effbench-0", "no applied object makes a pod"),
        # a copy to a path no claim holds
        (None, "effbench-files:/data/cifar-100-python", "effbench-files:/tmp/cifar-100-python", "is on no claim"),
        # a condition a PyTorchJob never has
        (None, "--for=condition=Running pytorchjob", "--for=condition=Ready pytorchjob", "has no condition Ready"),
    ],
    ids=["rwo-claim", "image-not-set", "no-claims", "wrong-pod", "not-on-a-claim", "wrong-condition"],
)  # fmt: skip
def test_the_kubernetes_check_refuses_a_recipe_that_would_not_work(manifest, old, new, refusal, tmp_path):
    """The stand-in kubectl fails the page for each mistake a cluster would fail it for: it can fail."""
    ws = workspace(tmp_path / "ws")
    cifar_download(ws)
    script = page_script("docs/kubernetes.md")
    if manifest:  # the mistake is in a manifest: a copy of entrypoint/ that has it
        (ws / "entrypoint").unlink()
        shutil.copytree(ROOT / "entrypoint", ws / "entrypoint")
        text = (ws / manifest).read_text()
        assert old in text
        (ws / manifest).write_text(text.replace(old, new, 1))
    else:
        assert old in script
        script = script.replace(old, new, 1)
    done = run_script("docs/kubernetes.md", script, ws, SCRIPTS["docs/kubernetes.md"])
    assert done.rc == 1 and "kubectl-check: " in done.err and refusal in done.err, (done.rc, done.err[-2000:])


def test_the_kubernetes_page_downloads_the_dataset_the_catalog_names():
    """The page's one download (a marked block) fetches CIFAR-100 from the URL effbench --download uses."""
    from effbench.datasets import dataset_spec

    (block,) = [b for b in shell_blocks(ROOT / "docs/kubernetes.md") if "network" in b.marks]
    url = re.search(r"https://\S+\.tar\.gz", "\n".join(block.lines)).group(0)
    assert url == dataset_spec("cifar100").archive.url


def readme_sample() -> dict[str, str]:
    """The README's sample report: metric -> value (the value's first line)."""
    (block,) = [b for b in check_docs.code_blocks(ROOT / "README.md") if b.lines and b.lines[0].startswith("metric ")]
    rows = {}
    for line in block.lines[2:]:
        if line.strip() and not line.startswith(" "):
            label, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            rows[label] = value
    return rows


# the sample's rows no timing moves (the dataset row counts the steps, which the CI run sets apart)
STEADY = ("status", "arch", "device", "batch size per device", "GFLOP per training image")


def assert_sample_matches(out: str, equal: tuple[str, ...]) -> None:
    """Every metric the README's sample shows is in `out`'s report; the `equal` ones with the same value."""
    sample = readme_sample()
    assert len(sample) >= 10
    printed: dict[str, str] = {}
    for line in out.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if len(parts) == 2:
            printed.setdefault(parts[0], parts[1])
    missing = [label for label in sample if label not in printed]
    assert missing == [], "README.md's sample report shows rows a smoke run does not print"
    for label in equal:
        assert printed[label] == sample[label], label


def test_the_readme_sample_report_is_what_a_smoke_run_prints(smoke):
    """The CI smoke run's report (the default suite's one run; --quiet prints its headline only, report.txt the
    report) holds every row of the README's sample."""
    assert_sample_matches((smoke[1] / "report.txt").read_text(), STEADY)


def effbench_argv(key: str, commands: set[str]) -> list[str] | None:
    """The effbench command inside a documented line (bare, or after a container's image): [sub, args...]."""
    import shlex

    words = shlex.split(key)
    if "..." in words or any("<" in w for w in words):
        return None
    for stop in ("&&", ";", "|"):
        if stop in words:
            words = words[: words.index(stop)]
    starts = [i for i, w in enumerate(words[:-1]) if w.endswith("effbench") and words[i + 1] in commands]
    return words[starts[-1] + 1 :] if starts else None


def test_every_marked_effbench_command_parses():
    """The lines that cannot run here still name a real command and real options: each is parsed by
    effbench's own CLI (the Click context Typer builds), not run. Values are strings there (RunConfig
    checks them when a run starts), so a wrong value is not caught here; a wrong option name is."""
    import typer

    from effbench.cli.app import app

    group = typer.main.get_command(app)
    ctx = group.make_context("effbench", ["--help"], resilient_parsing=True)  # a context; --help not acted on
    commands = set(group.list_commands(ctx))

    def parse(argv: list[str]) -> None:
        group.get_command(ctx, argv[0]).make_context(argv[0], argv[1:])

    parsed = 0
    for key in dict.fromkeys(c.key for c in doc_commands() if c.marks):
        argv = effbench_argv(key, commands)
        if argv is None:
            continue
        try:
            parse(argv)
        except Exception as e:  # Typer's Click (typer._click in 0.29): a UsageError naming the option
            pytest.fail(f"{key}: {e}")
        parsed += 1
    assert parsed >= 25  # the bare ones and the ones inside docker/singularity lines
    with pytest.raises(Exception, match="No such option: --arhc"):  # the check can fail
        parse(["run", "--arhc", "b5"])
