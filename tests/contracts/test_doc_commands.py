"""Every shell command in README.md and docs/*.md, run as written where a CPU can run it.

The commands are the lines of the docs' ```bash (sh, shell, console) blocks, `\\` continuations joined
(tools/check_docs.shell_commands). Each one is either in RUN (how it is run and what it must show), in
STATE (a shell line whose effect the block's later commands carry), or in SKIP (why it cannot run here);
a command the docs gain that is in none of them fails test_every_doc_command_is_run_or_skipped, so the
docs cannot drift from what is tested.

How a command runs: through bash, its text as written (comments included), in a fresh folder (the
`ws` fixture) where `effbench` on PATH and `.venv/bin/...` are this checkout's, and `benchmarks/` is the
repository's. What a command needs that the docs assume exists (a run folder under the name the command
uses, ci/baseline.json, a sweep folder, a dataset folder) is made by its Spec.setup before it runs.
The only rewrites are the ones in SUBSTITUTIONS, each with its reason (an absolute path outside the
test's folder). `effbench` is this venv's console script (or pip's form of it where the venv's lacks
the `__main__` guard: effbench_bin). The smoke run of the README's CI block runs once per session; the
commands that read a run folder get copies of its folder. A command over ~20 s on 2 loaded cores is
marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
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


def places(key: str) -> list[check_docs.Command]:
    return [c for c in doc_commands() if c.key == key]


# ---------------------------------------------------------------------------------------------------------
# Why a command cannot run here. Every skipped command names one of these.
GPU = "needs an NVIDIA GPU"
CONTAINER = "builds or runs a container image (no docker/apptainer/singularity engine on the test machine)"
SLURM = "submits a Slurm job"
NETWORK = "needs the network (a download, a package index)"
DATASET = "needs a real dataset on disk (CIFAR, Food-101) and hours on a CPU"
VENV = "creates or installs into a virtual environment (the test runs in one)"
SUITE = "runs the test suite itself"
ELIDED = "not a whole command: `...` stands for the options of the command above it"
PLACEHOLDER = "a template: `<version>` is for the reader to fill in"
FULL_SIZE = "a full-size run (resnet50 at 224 px, default epochs): hours on a CPU"
TRACKING_SERVER = (
    "starts or needs an MLflow server on a fixed port (tests/e2e/test_tracking.py starts one on a free port and "
    "runs these commands against it)"
)

SKIP: dict[str, str] = {
    # README.md
    "make run": VENV + "; then `effbench run --smoke`, run below from getting-started.md",
    "make test": SUITE,
    "docker build -t effbench .": CONTAINER,
    'docker run --rm --gpus 4 --shm-size=8g --user "$(id -u):$(id -g)" -v "$PWD/results:/results" '
    '-v "$PWD/data:/data:ro" effbench run --arch b5 --dataset cifar': CONTAINER + "; " + GPU,
    "docker save effbench:latest -o effbench.tar && apptainer build effbench.sif singularity.def": CONTAINER,
    "singularity exec --nv effbench.sif effbench run --arch b5 --dataset cifar": CONTAINER + "; " + GPU,
    "sbatch --nodes 4 entrypoint/slurm-multi-node.sbatch": SLURM,
    "effbench run --arch b5 --dataset cifar --download": NETWORK + "; " + DATASET,
    "effbench sweep --preset workers": DATASET,
    "effbench track results/ --track http://mlflow:5000": TRACKING_SERVER,
    # docs/PERFORMANCE.md
    ".venv/bin/pip install timm": VENV + "; " + NETWORK,
    ".venv/bin/python benchmarks/timm_compare.py": GPU,
    ".venv/bin/python benchmarks/harness_overhead.py --device cuda --arch b0 --image-size 224 --batch-size 128": GPU,
    ".venv/bin/python benchmarks/cifar_loader.py --device cuda --data-dir ./data": GPU + "; " + DATASET,
    ".venv/bin/python benchmarks/food_loader.py --device cuda --data-dir ./data": GPU + "; " + DATASET,
    ".venv/bin/effbench run --dataset food --data-dir ./data --data-only --gpu-decode": GPU + "; " + DATASET,
    ".venv/bin/effbench run --dataset food --data-dir ./data --data-only": DATASET,
    # docs/containers.md
    "docker run --rm --gpus all effbench doctor": CONTAINER + "; " + GPU,
    "docker run --rm effbench --version": CONTAINER,
    "docker run --rm effbench effbench run --smoke": CONTAINER,
    'docker run --rm --read-only --tmpfs /tmp -v "$PWD/results:/results" effbench run --smoke': CONTAINER,
    "python3 tools/lock.py generate --flavour cu126 --index-url https://download.pytorch.org/whl/cu126 "
    "--torch <version>+cu126 --torchvision <version>+cu126": NETWORK + "; " + PLACEHOLDER,
    "docker build -t effbench:cu126 --build-arg FLAVOUR=cu126 --build-arg "
    "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 --build-arg TORCH_VERSION=<version> "
    "--build-arg TORCHVISION_VERSION=<matching version> .": CONTAINER + "; " + PLACEHOLDER,
    'export UID; export GID="$(id -g)"; mkdir -p results data': "sets up the `docker compose` lines after it; "
    + CONTAINER,
    "GPU_COUNT=2 docker compose run --rm effbench run --arch b0 --dataset cifar100": CONTAINER + "; " + GPU,
    "docker compose --profile cpu up cpu": CONTAINER,
    "docker compose -f compose.yaml -f compose.memlock.yaml up effbench": CONTAINER + "; " + GPU,
    "docker save effbench:latest -o effbench.tar": CONTAINER,
    "apptainer build effbench.sif singularity.def": CONTAINER,
    "apptainer test effbench.sif": CONTAINER,
    "sbatch entrypoint/slurm-single-node.sbatch": SLURM,
    "python3 tools/lock.py generate --flavour cu126 --index-url https://download.pytorch.org/whl/cu126 "
    "--torch <version>+cu126 --torchvision <version>+cu126 --python-version 3.12": NETWORK + "; " + PLACEHOLDER,
    "docker build -t effbench:cu126 --build-arg FLAVOUR=cu126 --build-arg "
    "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 --build-arg TORCH_VERSION=<version> "
    "--build-arg TORCHVISION_VERSION=<version> --build-arg BASE_IMAGE=nvidia/cuda:12.6.3-base-ubuntu24.04 "
    "--build-arg BASE_DIGEST= .": CONTAINER + "; " + PLACEHOLDER,
    # docs/distributed.md
    "effbench run --arch b0 --dataset cifar": GPU + "; " + DATASET,
    "effbench run --arch b0 --dataset cifar --gpus 2": GPU + "; " + DATASET,
    "effbench run --arch b0 --dataset cifar --gpus 4 --strategy dp": GPU + "; " + DATASET,
    "effbench run --arch b0 --dataset cifar --gpus 1,2,4": GPU + "; " + DATASET,
    # docs/getting-started.md
    "python3 -m venv .venv": VENV,
    ".venv/bin/pip install torch==2.14.1 torchvision==0.29.1": VENV + "; " + NETWORK,
    ".venv/bin/pip install -e '.[dev]'": VENV + "; " + NETWORK,
    ".venv/bin/python -m pytest": SUITE,
    "effbench run --arch b5 --dataset cifar --data-dir ./data --download": NETWORK + "; " + DATASET,
    "effbench run --arch b3 --dataset food --val-fraction 0.25 --download": NETWORK + "; " + DATASET,
    "effbench run --arch resnet18 --dataset cifar10 --no-batch-norm --optimizer adadelta --workers 4": DATASET,
    "effbench run --arch resnet18 --dataset cifar10 --device cpu": DATASET,
    "effbench run --arch resnet50 --dataset synthetic": FULL_SIZE,
    "effbench run --arch timm:convnext_tiny --dataset cifar100 --weights imagenet --freeze classifier": NETWORK
    + " (timm's ImageNet weights); "
    + DATASET,
    "effbench sweep --preset yardstick --device cuda": GPU,
    # docs/selftest.md
    "docker run --rm --gpus all effbench selftest": CONTAINER + "; " + GPU,
    # docs/sweeps-and-reports.md
    "effbench sweep --preset workers --dataset cifar10 --data-dir ./data": DATASET,
    "effbench sweep --preset optimizers": DATASET,
    "effbench sweep --preset batchnorm": DATASET,
    "effbench sweep --preset cpu-vs-gpu": DATASET,
    "effbench sweep --preset batch-size": DATASET,
    "effbench sweep --preset scaling": DATASET,
    "effbench sweep --preset models --data-dir ./data": DATASET,
    "effbench sweep --preset workers --workers 0,2,4 --loader torchvision": DATASET,
    # docs/tracking.md
    "python3 -m venv ~/mlflow-server && ~/mlflow-server/bin/pip install 'mlflow==3.17.2'": VENV + "; " + NETWORK,
    "mkdir -p ~/mlflow": "makes the server's folder in the reader's home; " + TRACKING_SERVER,
    '~/mlflow-server/bin/mlflow server --backend-store-uri "sqlite:///$HOME/mlflow/mlflow.db" --artifacts-destination '
    '"$HOME/mlflow/artifacts" --host 127.0.0.1 --port 5000 &': TRACKING_SERVER,
    "effbench run --smoke --track http://127.0.0.1:5000": TRACKING_SERVER,
    "effbench sweep --smoke --batch-size 16,32 --track http://127.0.0.1:5000": TRACKING_SERVER,
    "effbench track results/ --track http://127.0.0.1:5000": TRACKING_SERVER,
    "effbench report --from-tracking http://127.0.0.1:5000 --experiment effbench -o leaderboard/": TRACKING_SERVER,
    # docs/time-to-accuracy.md
    "effbench run ... --target-top1 0.9 --stop-at-target": ELIDED,
    "effbench sweep --batch-size 32,128,512 --target-top1 0.9 ...": ELIDED,
}

# Lines that change the shell's state for the block's later commands: each later command of the same
# block runs after them (as a script would), so they are run, not skipped.
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
GRID_SWEEP = (
    "effbench sweep --batch-size 32,64 --workers 0,2 --device cpu --dataset synthetic --arch resnet18 "
    "--image-size 32 --max-steps 10 --epochs 1 --repeats 5"
)


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


def place(*dests: str, baseline: bool = False) -> Callable[[Path, Path | None], None]:
    """Setup: copies of the session's smoke run folder (or grid sweep folder) at `dests`, and with
    `baseline` its results.json as ci/baseline.json (the docs' "first time: cp ... ci/baseline.json")."""

    def setup(ws: Path, made: Path | None) -> None:
        assert made is not None
        for dest in dests:
            shutil.copytree(made, ws / dest)
        if baseline:
            (ws / "ci").mkdir()
            shutil.copy(made / "results.json", ws / "ci" / "baseline.json")

    return setup


def digits(ws: Path, made: Path | None) -> None:
    from test_digits_learns import write_digits  # scikit-learn's bundled digits as train/ + val/ folders

    write_digits(ws / "digits")


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


PASS_GATE = (r"PASS",)

RUN: dict[str, Spec] = {
    # README.md: the CI block (its smoke run is the session's one)
    SMOKE: Spec(smoke=True, shows=(r"^run folder: ci-out/",)),
    'effbench compare ci/baseline.json "$(ls -d ci-out/*/ | tail -n 1)" --fail-if-slower 10 --fail-if-less-accurate 2': Spec(
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
    # on a machine busier than its cores (a loaded test machine) the last line names the load instead
    "effbench doctor": Spec(shows=(r"^GPUs visible\s+0$", r"^doctor: (all checks passed|no check failed, but)")),
    "effbench models": Spec(shows=(r"^efficientnet-b0\s+effbench", r"^89 architectures")),
    "effbench datasets": Spec(shows=(r"^datasets under --data-dir data ", r"^cifar100 \(cifar\)\s+missing")),
    # docs/PERFORMANCE.md: the benchmarks as measured on this 2-core machine
    ".venv/bin/python benchmarks/harness_overhead.py --rounds 7": Spec(slow=True, timeout=1800),
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
    # docs/selftest.md
    "effbench selftest --device cpu": Spec(slow=True, timeout=600, shows=(r"PASS", r"SKIP")),
    # docs/sweeps-and-reports.md
    GRID_SWEEP: Spec(sweep=True, slow=True),
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
    'effbench compare ci/baseline.json "$run" --fail-if-slower 10 --fail-if-less-accurate 2': Spec(
        smoke=True, setup=place("ci-out/run", baseline=True), shows=PASS_GATE
    ),
    # docs/tracking.md: no server, a SQLite file (MLflow's SQL store: sqlalchemy, alembic in the dev extra)
    "effbench track results/ --track sqlite:///mlflow.db": Spec(
        smoke=True, setup=place("results/run"), shows=(r"^tracked: 1 run\(s\) in experiment 'effbench' \(1 new\)",)
    ),
    # docs/time-to-accuracy.md
    "effbench run --dataset imagefolder --data-dir ./digits --arch resnet18 --image-size 16 --epochs 10 "
    "--target-top1 0.9": Spec(slow=True, timeout=1200, setup=digits),
}


def assert_count(out: str, n: int) -> None:
    assert len(json.loads(out)) == n


# ---------------------------------------------------------------------------------------------------------
def workspace(folder: Path) -> Path:
    """A fresh folder as a reader's checkout looks from its root: .venv/ (this one) and benchmarks/."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".venv").symlink_to(VENV_BIN.parent)
    (folder / "benchmarks").symlink_to(ROOT / "benchmarks")
    return folder


# A console script of the shape pip writes (distlib's ScriptMaker template, less its argv[0] cleanup). The guard:
# selftest's all-reduce starts ranks with multiprocessing's "spawn", which runs the parent's script again
# as __mp_main__; without the guard each rank runs the whole CLI and exits 1.
CONSOLE_SCRIPT = """#!{python}
import sys
from effbench.cli.app import main
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
    env = dict(os.environ, PATH=f"{effbench_bin(ws)}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(
        ["bash", "-c", "\n".join([*state, text])],
        cwd=ws,
        env=env,
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
    return "+".join(f"{check_docs.shown(c.path)}:{c.line}" for c in places(key))


def cases() -> list:
    keys = dict.fromkeys(c.key for c in doc_commands() if c.key in RUN)
    return [pytest.param(key, id=case_id(key), marks=[pytest.mark.slow] if RUN[key].slow else []) for key in keys]


def test_every_doc_command_is_run_or_skipped():
    found = {c.key: c for c in doc_commands()}
    unknown = [
        f"{check_docs.shown(c.path)}:{c.line}: {k}"
        for k, c in found.items()
        if k not in RUN and k not in SKIP and k not in STATE
    ]
    assert unknown == [], "a documented command is neither run (RUN, STATE) nor skipped with a reason (SKIP)"
    both = set(RUN) & set(SKIP) | set(RUN) & set(STATE) | set(SKIP) & set(STATE)
    assert both == set()
    stale = sorted(k for k in [*RUN, *SKIP, *STATE, *SUBSTITUTIONS] if k not in found)
    assert stale == [], "these table entries name commands no doc holds any more"


def test_every_code_block_names_its_language():
    """A block without one could hold commands this test never sees: shell blocks say bash, the rest text."""
    bare = [
        f"{check_docs.shown(b.path)}:{b.line}"
        for p in check_docs.doc_files()
        for b in check_docs.code_blocks(p)
        if not b.lang
    ]
    assert bare == []


def test_the_extractor_joins_continuations_and_drops_comments(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "```bash\n# a comment line\neffbench run --a 1 \\\n    --b 2   # what it does\n\n"
        "echo '# not a comment' \"x # y\" # gone\n```\n```text\neffbench not-a-command\n```\n"
    )
    blocks = check_docs.code_blocks(page)
    assert [(b.lang, b.line) for b in blocks] == [("bash", 1), ("text", 8)]
    cmds = check_docs.shell_commands(blocks[0])
    assert [(c.line, c.key) for c in cmds] == [(3, "effbench run --a 1 --b 2"), (6, "echo '# not a comment' \"x # y\"")]


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
    """The CI smoke run (the default suite's one run) prints every row of the README's sample."""
    assert_sample_matches(smoke[0].out, STEADY)


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


def test_every_skipped_effbench_command_parses():
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
    for key in SKIP:
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
