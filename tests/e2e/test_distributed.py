"""torchrun + gloo on one machine: DDP runs, two 'nodes' on 127.0.0.1, rank failure, signals, scaling."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest


EFFBENCH = [sys.executable, "-m", "effbench"]
TINY = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--quiet", "--workers", "0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_dirs(output: Path) -> list[Path]:
    return sorted(p.parent for p in output.rglob("results.json"))


def wait_for_running(output: Path, proc: subprocess.Popen, timeout_s: float = 90) -> Path:
    """Wait until rank 0 has built everything and is about to train: config.json is written then (results.json
    says `running` from setup on, before the process group has any work)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for d in run_dirs(output):
            if (d / "config.json").exists() and json.loads((d / "results.json").read_text())["status"] == "running":
                return d
        time.sleep(0.2)
    raise AssertionError("the run never started")


def start_endless_two_rank_run(out: Path, *extra: str) -> subprocess.Popen:
    """Two gloo ranks on synthetic data with a step budget no test waits for."""
    return subprocess.Popen(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "100000", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "2", *extra, "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def kill_family(proc: subprocess.Popen) -> None:
    """Test cleanup only: whatever is still running from this launch."""
    if proc.poll() is None:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.communicate()


def ranks_of(proc: subprocess.Popen) -> dict[int, psutil.Process]:
    found = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            # The ranks are the `effbench worker` processes torchrun started: they carry RANK in their env
            # (the torchrun agent's own argv also mentions the worker, but it has no RANK).
            rank = child.environ().get("RANK")
            if "worker" in child.cmdline() and rank is not None:
                found[int(rank)] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def test_two_gloo_processes_share_a_cifar_epoch(tmp_path, cifar10_dir):
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "cifar10", "--data-dir", str(cifar10_dir), "--nproc", "2",
         "--batch-size", "8", "--epochs", "1", "--warmup-steps", "1", "--output", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["world_size"] == 2 and r["strategy"] == "ddp"
    assert [x["rank"] for x in r["ranks"]] == [0, 1]
    train_size = r["data"]["train_size"]
    per_rank_steps = train_size // 2 // 8  # DistributedSampler(drop_last) then whole batches
    assert r["epochs"][0]["images"] == 2 * per_rank_steps * 8
    assert sum(x["images"] for x in r["ranks"]) == 2 * (per_rank_steps - 1) * 8  # one warm-up step per rank excluded
    assert r["measured"]["images"] == sum(x["images"] for x in r["ranks"])
    loss = r["epochs"][0]["train_loss"]
    assert loss == loss and loss < 100  # finite
    assert r["launch"]["threads_per_proc"] >= 1 and r["launch"]["env"]["OMP_NUM_THREADS"]
    assert r["throughput_img_s"] > 0


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_nan_loss_seen_by_one_rank_stops_every_rank_at_that_step_as_diverged(tmp_path):
    # Only rank 1's recorded loss goes NaN (faults.py hook; the gradients stay finite, so rank 0, the one
    # that writes results.json, never sees one). Before the ranks agreed, rank 1 stopped alone and rank 0
    # waited in DDP's next all-reduce: the job ended `failed`. A short --pg-timeout-s makes such a
    # regression fail fast. (Which rank sees it first is covered without processes in test_bad_input.py.)
    nan_on = "1:3"
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", "--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu",
         "--quiet", "--workers", "0", "--dataset", "synthetic", "--batch-size", "2", "--max-steps", "8",
         "--epochs", "1", "--warmup-steps", "1", "--log-interval", "2", "--nproc", "2", "--pg-timeout-s", "20",
         "--output", str(out)],
        capture_output=True, text=True, timeout=180, env={**os.environ, "EFFBENCH_FAULT_NAN_LOSS": nan_on},
    )  # fmt: skip
    rank = int(nan_on.split(":")[0])
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: run diverged") and f"nan on rank {rank} at step 3 " in last, res.stderr[-3000:]
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "diverged"
    # the run's step 3 (counted from 1, as the hook's STEP) is in the interval of steps 3-4, checked after
    # step 4 by both ranks; epoch 1 as the progress lines number it
    assert r["diverged"] == {"epoch": 1, "step": 3, "global_step": 3, "loss": "nan", "rank": rank}
    assert r["epochs"] == []  # stopped inside the first epoch, on every rank


def _agree_on_two_gloo_ranks(rank: int, init: str, offers: list, out: str) -> None:
    import torch
    import torch.distributed as dist

    from effbench.launch.distributed import nonfinite_agreement

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        agree = nonfinite_agreement(torch.device("cpu"))
        answers = [agree(offer[rank]) for offer in offers]  # one collective per check, as train.py calls it
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(answers))


def test_two_gloo_ranks_agree_on_the_earliest_non_finite_loss_either_saw(tmp_path):
    import torch.multiprocessing as mp

    inf = float("inf")
    offers = [  # per check: (rank 0's finding, rank 1's finding)
        (None, None),
        ((3, inf), None),  # only rank 0 saw one: rank 1 stops too
        (None, (5, -inf)),
        ((9, inf), (8, -inf)),  # the earlier step wins, whoever saw it
        ((4, inf), (4, -inf)),  # a tie: the lower rank
    ]
    mp.spawn(_agree_on_two_gloo_ranks, args=(f"file://{tmp_path}/rdzv", offers, str(tmp_path)), nprocs=2)
    expected = [None, [3, inf, 0], [5, -inf, 1], [8, -inf, 1], [4, inf, 0]]  # json: tuples as lists
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected


def _decide_on_two_gloo_ranks(rank: int, init: str, offers: list, out: str) -> None:
    import torch
    import torch.distributed as dist

    from effbench.launch.distributed import rank0_decides

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        decide = rank0_decides(torch.device("cpu"))
        answers = [decide(offer[rank]) for offer in offers]  # one broadcast per decision point, as train.py calls it
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(answers))


def test_two_gloo_ranks_take_rank_0s_warmup_and_until_decisions(tmp_path):
    # issue 48: the warm-up's end and --until's stop must fall at the same step on every rank, or their measured
    # windows differ and DDP's next all-reduce pairs a measured step with a warm-up one: rank 0 decides
    import torch.multiprocessing as mp

    offers = [(False, True), (True, False), (True, True), (False, False)]  # per point: (rank 0's, rank 1's)
    mp.spawn(_decide_on_two_gloo_ranks, args=(f"file://{tmp_path}/rdzv", offers, str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == [False, True, True, False]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_two_nodes_on_loopback_complete_one_run(tmp_path):
    port = free_port()
    out = tmp_path / "out"
    common = [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "3", "--epochs", "1",
              "--warmup-steps", "1", "--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-id", "t2n", "--output", str(out)]  # fmt: skip
    procs = [subprocess.Popen(common, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    (run,) = run_dirs(out)  # only global rank 0 wrote a folder
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["world_size"] == 2 and len(r["ranks"]) == 2


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_killed_rank_ends_the_job_and_is_named(tmp_path):
    out = tmp_path / "out"
    proc = start_endless_two_rank_run(out, "--pg-timeout-s", "30", "--log-interval", "1")
    try:
        run = wait_for_running(out, proc)
        ranks = ranks_of(proc)
        assert set(ranks) == {0, 1}
        t0 = time.monotonic()
        ranks[1].send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 60
    finally:
        kill_family(proc)
    assert proc.returncode not in (0, None)
    assert "rank 1" in err and "SIGKILL" in err
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "failed" and "rank 1" in r["error"]["message"]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])  # SIGHUP: the terminal closed (issue 46)
def test_sigterm_to_the_parent_leaves_no_process(signum, tmp_path):
    out = tmp_path / "out"
    proc = start_endless_two_rank_run(out)
    try:
        run = wait_for_running(out, proc)
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) >= 3  # torchrun + two ranks
        proc.send_signal(signum)
        proc.communicate(timeout=60)
    finally:
        kill_family(proc)
    assert proc.returncode == 128 + signum
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.pid for p in alive]
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "interrupted"


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_sigkill_of_the_parent_leaves_no_orphan_and_a_readable_folder(tmp_path):
    from effbench.results import read_results

    out = tmp_path / "out"
    proc = start_endless_two_rank_run(out)
    try:
        run = wait_for_running(out, proc)
        family = psutil.Process(proc.pid).children(recursive=True)
        assert len(family) >= 3  # torchrun + two ranks
        proc.send_signal(signal.SIGKILL)  # nothing can be forwarded: the children must notice by themselves
        # its pipes close when the last child holding them ends: 11 s at load average 8 on 2 cores (the ranks
        # write their `interrupted` record first), so the same bound as the family's
        proc.communicate(timeout=45)
        gone, alive = psutil.wait_procs(family, timeout=45)
    finally:
        kill_family(proc)
        for p in family:
            if p.is_running():
                p.kill()
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
    r = read_results(run / "results.json")  # atomic writes: always a whole, valid file
    assert r["status"] in ("interrupted", "running")


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_cpu_scaling_series_writes_the_table(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "4", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "1,2", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    stdout, stderr = proc.communicate(timeout=300)
    res = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    (series,) = [p for p in out.iterdir() if "_scaling_" in p.name]
    table = json.loads((series / "scaling.json").read_text())
    assert [r["devices"] for r in table["rows"]] == [1, 2]
    assert table["rows"][0]["speedup"] == pytest.approx(1.0)
    assert table["rows"][1]["efficiency"] == pytest.approx(table["rows"][1]["speedup"] / 2)
    scaling_txt = (series / "scaling.txt").read_text()
    assert "efficiency" in scaling_txt and "Scaling" in res.stdout
    # issue 47: within 100 columns, in the file and printed into this pipe (12 columns: 180 wide before)
    printed = res.stdout[res.stdout.index("Scaling") :]
    assert max(map(len, scaling_txt.splitlines())) <= 100 and max(map(len, printed.splitlines())) <= 100
    words = set(scaling_txt.split())  # every column kept in the file (headers wrapped, the table split in parts)
    assert {"straggler", "spread", "warm-up", "efficiency", "speedup"} <= words
    assert len(run_dirs(series)) == 2
    # every member ran in a child of the CLI, the 1-process member too (none inherits another's memory)
    pids = [json.loads((r / "results.json").read_text())["launch"]["pid"] for r in run_dirs(series)]
    assert proc.pid not in pids and len(set(pids)) == 2


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_one_rank_out_of_memory_makes_the_job_oom_naming_that_rank(tmp_path):
    # Only rank 1 runs out of memory (faults.py hook, RANK:N) at the start of training; rank 0 is then stopped
    # in DDP's first collective (broken by the dead peer, or torchrun's SIGTERM) and records `failed` or
    # `interrupted`. Before the OOM markers the job was settled `failed (rank 1 failed ...)`, so a batch-size
    # sweep cell on 2+ devices never said `oom`. A short --pg-timeout-s makes a regression fail fast.
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "4", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "2", "--pg-timeout-s", "20", "--output", str(out)],
        capture_output=True, text=True, timeout=180, env={**os.environ, "EFFBENCH_FAULT_OOM_AT_BATCH": "1:4"},
    )  # fmt: skip
    # as an OOM in one process (test_sweep.py): exit 1, last line `error: run oom (OutOfMemoryError: ...`
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: run oom (OutOfMemoryError: rank 1: OutOfMemoryError: injected by"), last
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "oom" and r["world_size"] == 2 and "signal" not in r
    assert r["error"]["oom_ranks"] == [1] and r["error"]["type"] == "OutOfMemoryError"
    assert r["error"]["message"].startswith(
        "rank 1: OutOfMemoryError: injected by EFFBENCH_FAULT_OOM_AT_BATCH=1:4: batch size per device 4 >= 4"
    )
    # the reports are drawn once, by the launcher, with the settled record: rank 0 printed its own `failed` /
    # `interrupted` report before, and the launcher redrew the files `oom` (tests/e2e/test_run_reports.py)
    status_rows = [line.split() for line in (run / "report.txt").read_text().splitlines() if line.startswith("status ")]
    assert status_rows == [["status", "oom"]]
    printed = [line.split() for line in res.stdout.splitlines() if line.startswith("status ")]
    assert printed == [["status", "oom"]], res.stdout[-3000:]


def _torch_oom(message: str) -> BaseException:
    import torch

    return torch.OutOfMemoryError(message)


WORKER_ENDS = [
    # (what run_benchmark does, the marker rank 1 leaves beside the spec, or None)
    ("returns", _torch_oom("CUDA out of memory. Tried to allocate 2 GiB\nmore"),
     {"rank": 1, "type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB"}),
    ("raises", RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),  # while building: DDP's broadcast, .to(device)
     {"rank": 1, "type": "RuntimeError", "message": "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}),
    ("returns", RuntimeError("Connection closed by peer"), None),
    ("raises", ValueError("a bug"), None),
]  # fmt: skip


@pytest.mark.parametrize("how, exc, marker", WORKER_ENDS)
def test_a_rank_leaves_an_oom_marker_beside_the_spec_only_when_it_ran_out_of_memory(
    how, exc, marker, tmp_path, monkeypatch
):
    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.launch.plan import LaunchPlan
    from effbench.run import folder, launch, record

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "config": RunConfig(arch="resnet18", dataset="synthetic", device="cpu").to_dict(), "run_dir": str(tmp_path / "run"),
        "command": ["effbench"], "plan": folder.plan_dict(LaunchPlan("torchrun", "cpu", 2, 1, 1)), "progress": False,
    }))  # fmt: skip
    monkeypatch.setenv("RANK", "1")  # with WORLD_SIZE 1 process_group joins no group (distributed.torchrun_env)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(supervise, "exit_with_parent", lambda *_a: None)  # it would set PDEATHSIG on pytest itself

    def run_benchmark(*_a, **_k):
        if how == "raises":
            raise exc
        # the record run_benchmark returns
        ended = record.ended(
            {"schema_version": 1, "status": "running"}, record.outcome_of(exc, received=[], phase="epochs")
        )
        return launch.RunOutcome(None, ended)

    monkeypatch.setattr(launch, "run_benchmark", run_benchmark)
    if how == "raises":
        with pytest.raises(type(exc)):
            launch.worker_main(spec)
    else:
        assert launch.worker_main(spec) == 1
    left = sorted(p.name for p in tmp_path.iterdir())
    if marker is None:
        assert left == ["spec.json"]
    else:
        assert left == ["oom-rank1.json", "spec.json"]
        assert json.loads((tmp_path / "oom-rank1.json").read_text()) == marker


def test_a_child_that_left_only_an_oom_marker_is_oom_not_failed(monkeypatch, tmp_path):
    # The branch with no results.json on this node (rank 0 on another node, or rank 0 removed its folder after
    # crashing while it built the run): the launcher still reads the markers the child left beside the spec.
    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.launch.supervise import SupervisedResult
    from effbench.run import launch

    def in_this_process(*_a, **_k):
        raise AssertionError("an isolated run must not train in the parent")

    def child_ran_out(argv, env, **_k):  # the side-effecting leaf: a child that ran out while building its model
        spec = Path(argv[argv.index("--spec") + 1])
        message = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        (spec.parent / "oom-rank0.json").write_text(json.dumps({"rank": 0, "type": "RuntimeError", "message": message}))
        return SupervisedResult(returncode=1, signal=None, failure=None)

    monkeypatch.setattr(launch, "run_benchmark", in_this_process)
    monkeypatch.setattr(supervise, "run_supervised", child_ran_out)
    cfg = RunConfig(arch="resnet18", dataset="synthetic", device="cpu", weights="none", output=tmp_path)
    outcome = launch.run(cfg, command=["t"], echo=lambda _s: None, progress=False, isolate=True)
    assert outcome.run_dir is None and outcome.exit_code == 1
    assert outcome.results.model_dump(exclude_unset=True) == {"schema_version": 1, "status": "oom", "error": {
        "type": "RuntimeError", "oom_ranks": [0],
        "message": "rank 0: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"}}  # fmt: skip


@pytest.mark.slow  # two torchrun launches: ~45 s on 2 cores
def test_a_batch_size_sweep_on_two_ranks_says_oom_for_the_cell_one_rank_could_not_fit(tmp_path):
    # What the sweep and its tables key on (sweep/runner.py, report/sweep_tables.py) is the cell's status, from
    # the settled results.json.
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "sweep", *TINY, "--dataset", "synthetic", "--batch-size", "8,4", "--max-steps", "3", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "2", "--pg-timeout-s", "20", "--no-profile", "--output", str(out)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "EFFBENCH_FAULT_OOM_AT_BATCH": "1:8"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]  # OOM is data, not a failure
    (sweep_json,) = out.rglob("sweep.json")
    cells = json.loads(sweep_json.read_text())["cells"]
    assert [(c["params"]["batch_size"], c["status"]) for c in cells] == [(8, "oom"), (4, "ok")]
    assert cells[0]["error"]["oom_ranks"] == [1] and cells[0]["error"]["message"].startswith("rank 1: OutOfMemoryError")
    assert "out of memory from 8" in (sweep_json.parent / "sweep.txt").read_text()
    # the sweep prints its own lines: no torchrun rank 0's run folder line or whole report between them
    assert "run folder:" not in res.stdout and "Verdict:" not in res.stdout, res.stdout[-2000:]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == len(set(warnings)), warnings  # a preflight warning once, not once per cell


@pytest.mark.parametrize("where", ["run", "group"])
def test_a_rank_stopped_by_a_signal_outside_the_runs_phases_exits_silently(where, tmp_path, monkeypatch, capsys):
    """torchrun SIGTERMs the other ranks when one fails (a run folder deleted under --nproc 2): a rank that got it
    while leaving the process group printed "error: interrupted by SIGTERM" beside the launcher's one line."""
    import contextlib
    import signal

    from effbench import results, schema
    from effbench.config import RunConfig
    from effbench.launch import distributed, supervise
    from effbench.launch.plan import LaunchPlan
    from effbench.run import folder, launch
    from effbench.run.phases import Interrupted

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "config": RunConfig(arch="resnet18", dataset="synthetic", device="cpu").to_dict(), "run_dir": str(tmp_path / "run"),
        "command": ["effbench"], "plan": folder.plan_dict(LaunchPlan("torchrun", "cpu", 2, 1, 1)), "progress": False,
    }))  # fmt: skip
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(supervise, "exit_with_parent", lambda *_a: None)

    def interrupted(*_a, **_k):
        raise Interrupted(signal.SIGTERM)

    if where == "run":
        monkeypatch.setattr(launch, "run_benchmark", interrupted)
    else:

        @contextlib.contextmanager
        def group(*_a, **_k):
            yield None
            interrupted()  # destroy_process_group's wait, after the record

        ok = schema.Results(schema_version=results.SCHEMA_VERSION, status="ok")
        monkeypatch.setattr(distributed, "process_group", group)
        monkeypatch.setattr(launch, "run_benchmark", lambda *_a, **_k: launch.RunOutcome(None, ok))
    assert launch.worker_main(spec) == 128 + signal.SIGTERM
    out, err = capsys.readouterr()
    assert out == err == ""


def test_a_rank_that_stopped_on_a_nonfinite_loss_leaves_a_diverged_marker(tmp_path, monkeypatch):
    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.launch.plan import LaunchPlan
    from effbench.run import folder, launch, record
    from effbench.run.train import Diverged

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "config": RunConfig(arch="resnet18", dataset="synthetic", device="cpu").to_dict(), "run_dir": str(tmp_path / "run"),
        "command": ["effbench"], "plan": folder.plan_dict(LaunchPlan("torchrun", "cpu", 2, 1, 1)), "progress": False,
    }))  # fmt: skip
    monkeypatch.setenv("RANK", "1")  # with WORLD_SIZE 1 process_group joins no group (distributed.torchrun_env)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(supervise, "exit_with_parent", lambda *_a: None)
    outcome = record.outcome_of(Diverged(0, 3, 7, float("nan"), rank=0), received=[], phase="epochs")
    ended = record.ended({"schema_version": 1, "status": "running"}, outcome)
    monkeypatch.setattr(launch, "run_benchmark", lambda *_a, **_k: launch.RunOutcome(None, ended))
    assert launch.worker_main(spec) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diverged-rank1.json", "spec.json"]
    marker = json.loads((tmp_path / "diverged-rank1.json").read_text())
    assert marker["rank"] == 1 and marker["diverged"]["global_step"] == 7


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_rank_without_a_validation_image_does_not_hang_the_job(tmp_path):
    # GPU truth 3.5: one validation image for two ranks (the shards are not padded): rank 1's shard is
    # empty, so it never made DDP's first no-grad forward, whose buffer broadcast rank 0 waited in, while
    # rank 1 waited in the epoch's gather: a hang until the process-group timeout (20 s here; 300 s by
    # default). Every rank now makes the broadcast itself and validates the bare module.
    import fakedata

    data = fakedata.make_imagefolder(tmp_path / "data", classes=2, per_class=8, size=24, split=True, val_per_class=1)
    (data / "val" / "class_1" / "img_000.jpg").unlink()
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "imagefolder", "--data-dir", str(data), "--batch-size", "2",
         "--max-steps", "3", "--epochs", "2", "--warmup-steps", "1", "--nproc", "2", "--pg-timeout-s", "20",
         "--no-profile", "--output", str(out)],
        capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["world_size"] == 2
    assert [e["val_images"] for e in r["epochs"]] == [1, 1]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
@pytest.mark.parametrize("where", ["start", "step", "end"])
def test_one_rank_failing_in_the_profiling_pass_voids_the_profile_not_the_run(tmp_path, where):
    # GPU truth 3.6: the failing rank caught its error and went on to the run's final gather while rank 0
    # was in the pass's next all-reduce: a hang until the process-group timeout (20 s here). The ranks now
    # agree on the pass's outcome at its start, before each step and at its end.
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "3", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "2", "--pg-timeout-s", "20", "--profile-steps", "1", "--output", str(out)],
        capture_output=True, text=True, timeout=200, env={**os.environ, "EFFBENCH_FAULT_PROFILE": f"1:{where}"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["throughput_img_s"] > 0
    assert r["profile_error"] == f"rank 1: RuntimeError: injected by EFFBENCH_FAULT_PROFILE=1:{where}"
    assert "profile" not in r or not r["profile"].get("phases")


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_rank_failing_inside_a_profiled_step_voids_the_profile_in_seconds(tmp_path):
    # N7, round four: rank 1 raises inside its first profiled step, past the agreement, while rank 0 waits in
    # that step's collectives (DDP's buffer broadcast and all-reduce). Before, rank 0 waited until the process-
    # group timeout (60 s here) and rank 1's next collective paired with rank 0's out of order: the run failed.
    # Now rank 1 posts its error to the store and shuts its gloo connections; rank 0's collective raises at once
    # and both read rank 1's error; the last gather goes through the store.
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "3", "--epochs", "1",
         "--warmup-steps", "1", "--nproc", "2", "--pg-timeout-s", "60", "--profile-steps", "1", "--output", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "EFFBENCH_FAULT_PROFILE": "1:in-step"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = run_dirs(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["throughput_img_s"] > 0 and r["world_size"] == 2
    assert r["profile_error"] == "rank 1: RuntimeError: injected by EFFBENCH_FAULT_PROFILE=1:in-step"
    assert "profile" not in r or not r["profile"].get("phases")
    # the pass ended by the abort, not by the 60 s timeout (a tiny pass takes 1-5 s here)
    assert r["wall_time_by_phase_s"]["profiling"] < 30


# --- issue 33 section 4: launch environments that contradict or cannot connect -----------------------------
def _job_env(**extra: str) -> dict[str, str]:
    """This process's environment without any scheduler's or launcher's variables, then `extra`."""
    from effbench.launch.plan import LAUNCHER_PREFIXES, LAUNCHER_VARS

    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", *LAUNCHER_PREFIXES)) and k not in LAUNCHER_VARS
    }
    return {**base, **extra}


@pytest.mark.timeout(60)
def test_an_unresolvable_slurm_rendezvous_host_is_one_line_before_torchrun(tmp_path):
    # The red-team case took 139 s and printed torchrun's C++ frames. `.invalid` never resolves (RFC 6761), so
    # this holds on any machine; the resolver is bounded (preflight.RESOLVE_TIMEOUT_S) where DNS is dead.
    env = _job_env(SLURM_JOB_ID="77", SLURM_NNODES="2", SLURM_NODEID="1", SLURM_PROCID="1",
                   SLURM_NTASKS_PER_NODE="1", SLURM_JOB_NODELIST="n1.invalid")  # fmt: skip
    out = tmp_path / "out"
    t0 = time.monotonic()
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--max-steps", "2", "--output", str(out)],
        capture_output=True, text=True, timeout=50, env=env,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-3000:]
    assert res.stderr.count("\n") == 1 and "frame #" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.startswith("error: SLURM_JOB_NODELIST: the rendezvous host 'n1.invalid'"), res.stderr
    assert time.monotonic() - t0 < 45  # no torchrun retrying the store
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", [{"RANK": "abc", "WORLD_SIZE": "2"}, {"LOCAL_WORLD_SIZE": "0"}])
def test_an_invalid_rank_variable_is_one_line_naming_it_before_anything_starts(bad, tmp_path):
    # RANK=abc used to end `rc 1, ChildFailedError: the effbench worker exited with 1`, the cause nowhere.
    out = tmp_path / "out"
    res = subprocess.run(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--max-steps", "2", "--nproc", "1,2", "--output", str(out)],
        capture_output=True, text=True, timeout=50, env=_job_env(**bad),
    )  # fmt: skip
    name = next(iter(bad))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-3000:]
    assert res.stderr.startswith(f"error: {name}: "), res.stderr
    assert not out.exists() or not list(out.iterdir())


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE  # reaped by whoever adopted it, or about to be
    except psutil.NoSuchProcess:
        return True


def _wait_gone(p: psutil.Process, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(p):
            return True
        time.sleep(0.1)
    return _gone(p)


@pytest.mark.slow  # 8-13 s on 2 cores: run by `make test-slow` (CI's slow step for test_distributed)
@pytest.mark.timeout(120)
def test_an_isolated_worker_in_a_pod_ignores_the_jobs_ranks_and_dies_with_a_killed_effbench(tmp_path):
    """The red-team case: a scaling series (--nproc 1,2) in a pod-like environment. The 1-process member runs
    in an isolated `effbench worker`, which inherited RANK=1 WORLD_SIZE=2 and waited in init_process_group for
    a rank 0 that does not exist; after SIGKILL of effbench it stayed alive as an orphan."""
    pod = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "4", "--max-steps", "100000",
         "--epochs", "1", "--warmup-steps", "1", "--nproc", "1,2", "--pg-timeout-s", "30", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_job_env(**pod),
    )  # fmt: skip
    worker = None
    try:
        run = wait_for_running(out, proc)  # the worker built its run: it joined no group of two
        (worker,) = [c for c in psutil.Process(proc.pid).children(recursive=True) if "worker" in c.cmdline()]
        assert "RANK" not in worker.environ() and "MASTER_ADDR" not in worker.environ()
        proc.send_signal(signal.SIGKILL)  # nothing can be forwarded: the worker must notice by itself
        proc.wait(timeout=10)
        assert _wait_gone(worker, 15), (worker.pid, worker.status())
    finally:
        kill_family(proc)
        if worker is not None and not _gone(worker):
            worker.kill()
    assert json.loads((run / "results.json").read_text())["status"] in ("interrupted", "running")


# A parent that starts a child which ignores SIGTERM, as a rank blocked in C++ (a c10d store connect, a
# collective) does: Python runs the handler only between bytecodes of the main thread, and none runs there.
_PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1]])
time.sleep(600)
"""
_STUCK_CHILD = """
import os, signal, time
from effbench.launch.supervise import exit_with_parent
exit_with_parent(grace_s=1.0, poll_s=0.1)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(os.getpid(), flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(60)
def test_a_worker_deaf_to_sigterm_is_killed_by_its_watchdog_once_its_parent_dies():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _STUCK_CHILD], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.ppid() == parent.pid
        parent.kill()
        parent.wait(timeout=10)
        t0 = time.monotonic()
        assert _wait_gone(child, 20), "the orphan outlived its watchdog"
        assert time.monotonic() - t0 > 0.5  # SIGTERM did nothing: the watchdog's SIGKILL after its grace did
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and not _gone(child):
            child.kill()


@pytest.mark.timeout(60)
def test_a_worker_that_crashed_before_its_run_says_why_in_the_one_error_line(monkeypatch, tmp_path):
    """No run folder keeps the worker's log when it crashed before building its run: the cause goes in the
    message (the red-team's RANK=abc worker ended `the effbench worker exited with 1`, int('abc') nowhere)."""
    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.run import launch

    real = supervise.run_supervised

    def crashing_worker(argv, env, **kw):  # the real supervisor, on a child that crashes as that worker did
        crash = "import sys; print('starting', file=sys.stderr); int('abc')"
        return real([sys.executable, "-c", crash], env, **kw)

    def in_this_process(*_a, **_k):
        raise AssertionError("an isolated run must not train in the parent")

    monkeypatch.setattr(supervise, "run_supervised", crashing_worker)
    monkeypatch.setattr(launch, "run_benchmark", in_this_process)
    cfg = RunConfig(arch="resnet18", dataset="synthetic", device="cpu", weights="none", output=tmp_path)
    outcome = launch.run(cfg, command=["t"], echo=lambda _s: None, progress=False, isolate=True)
    assert outcome.run_dir is None and outcome.results.status == "failed"
    assert outcome.results.error.message == (
        "the effbench worker exited with 1: ValueError: invalid literal for int() with base 10: 'abc'"
    )


def test_an_isolated_worker_and_torchrun_get_none_of_the_jobs_rank_variables(monkeypatch, tmp_path):
    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.launch.supervise import SupervisedResult
    from effbench.run import launch

    seen: list[dict] = []

    def capture(argv, env, **_k):  # the side-effecting leaf: what the child would get
        seen.append(dict(env))
        return SupervisedResult(returncode=1, signal=None, failure=None)

    monkeypatch.setattr(supervise, "run_supervised", capture)
    pod = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "bench-master-0", "MASTER_PORT": "23456",
           "PET_NNODES": "2", "TORCHELASTIC_RUN_ID": "outer", "NCCL_DEBUG": "WARN"}  # fmt: skip
    for k, v in pod.items():
        monkeypatch.setenv(k, v)
    base = dict(arch="resnet18", dataset="synthetic", device="cpu", weights="none", output=tmp_path)
    launch.run(RunConfig(**base), command=["t"], echo=None, progress=False, isolate=True)  # the isolated worker
    launch.run(RunConfig(**base, nproc=2), command=["t"], echo=None, progress=False)  # torchrun --standalone
    assert len(seen) == 2
    for env in seen:
        assert not {k for k in env if k in pod and k != "NCCL_DEBUG"}, sorted(env)
        assert env["NCCL_DEBUG"] == "WARN" and env["OMP_NUM_THREADS"]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_run_folder_deleted_under_torchrun_is_one_line_naming_it(tmp_path):
    """Issue 33 item 7 on two ranks: both hold at the epochs phase, the folder goes, they go on. Rank 0's next
    write fails; the launcher relays its error as the only line (the rank no longer prints its own copy)."""
    import shutil

    from effbench.run import faults

    out, release = tmp_path / "out", tmp_path / "release"
    env = {**os.environ, faults.FAULT_HOLD_ENV: "epochs", faults.FAULT_HOLD_RELEASE_ENV: str(release)}
    proc = subprocess.Popen(
        [*EFFBENCH, "run", *TINY, "--dataset", "synthetic", "--batch-size", "2", "--max-steps", "3", "--epochs", "2",
         "--warmup-steps", "1", "--no-profile", "--nproc", "2", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        held = 0
        while held < 2:  # each rank says so once it holds
            line = proc.stderr.readline()
            assert line, proc.communicate()
            held += line.startswith(f"{faults.HOLD_MARK} epochs")
        (run,) = [p for p in out.iterdir() if p.is_dir()]
        shutil.rmtree(run)
        release.touch()
        _, err = proc.communicate(timeout=120)
    finally:
        kill_family(proc)
    lines = [x for x in err.splitlines() if x and not x.startswith(faults.HOLD_MARK)]
    assert proc.returncode == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: --output:") and str(run) in lines[0] and "deleted or moved" in lines[0]
    assert "Traceback" not in err and not run.exists() and list(out.iterdir()) == []
