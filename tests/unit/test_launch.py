"""The torchrun argv and the launch decision, as pure functions of config and environment."""

from __future__ import annotations

import pytest

from effbench.launch import plan as launch
from effbench.errors import EffbenchError

WORKER = ["effbench", "worker", "--spec", "/tmp/spec.json"]


def plan(**kw):
    base = dict(
        device="auto", gpus=None, nproc=None, strategy="ddp", nnodes=1, node_rank=None, rdzv_endpoint=None,
        rdzv_id=None, visible_gpus=0, cores=16, env={}, python="/usr/bin/python3", worker_args=WORKER,
    )  # fmt: skip
    base.update(kw)
    return launch.plan_launch(**base)


def test_one_gpu_runs_in_process():
    p = plan(visible_gpus=1)
    assert (p.mode, p.device_type, p.world_size, p.argv) == ("inprocess", "cuda", 1, None)


def test_gpus_1_with_four_visible_stays_in_process():
    p = plan(visible_gpus=4, gpus=1)
    assert p.mode == "inprocess" and p.devices == 1


def test_four_gpus_launch_torchrun_standalone():
    p = plan(visible_gpus=4)
    assert p.mode == "torchrun" and p.world_size == 4
    assert p.argv == [
        "/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
        "--max-restarts", "0", "-m", *WORKER,
    ]  # fmt: skip
    assert p.threads_per_proc == 4 and p.env == {"OMP_NUM_THREADS": "4"}  # 16 cores / 4 ranks, not 16 each


def test_cpu_processes_use_torchrun_and_split_threads():
    p = plan(device="cpu", nproc=2, cores=8)
    assert p.mode == "torchrun" and p.device_type == "cpu" and p.world_size == 2
    assert "--nproc-per-node" in p.argv and p.argv[p.argv.index("--nproc-per-node") + 1] == "2"
    assert p.threads_per_proc == 4 and p.env == {"OMP_NUM_THREADS": "4"}


def test_user_pinned_threads_are_kept():
    p = plan(device="cpu", nproc=2, cores=8, env={"OMP_NUM_THREADS": "3"})
    assert p.threads_per_proc == 3


def test_slurm_two_nodes_builds_c10d_rendezvous():
    env = {
        "SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
        "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "1",
    }  # fmt: skip
    s = launch.slurm_settings(env)
    # the port is the job's: 20000 + 4242 % 10000, not torchrun's fixed 29500
    assert s == launch.SlurmSettings(nnodes=2, node_rank=1, rdzv_host="gpu07", job_id="4242", rdzv_port=24242)
    p = plan(visible_gpus=4, nnodes=s.nnodes, node_rank=s.node_rank, rdzv_endpoint=s.rdzv_endpoint, rdzv_id=s.job_id)
    assert p.world_size == 8
    assert p.argv[:3] == ["/usr/bin/python3", "-m", "torch.distributed.run"]
    assert "--standalone" not in p.argv
    joined = " ".join(p.argv)
    assert "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint gpu07:24242 --rdzv-id 4242 --node-rank 1" in joined
    assert "--nproc-per-node 4" in joined


@pytest.mark.parametrize(
    "nodelist, host",
    [
        ("node01", "node01"),
        ("a,b", "a"),
        ("gpu[01-04,07]", "gpu01"),
        ("gpu[3,5],cpu[1-2]", "gpu3"),
        ("x-y[010-012]", "x-y010"),
    ],
)
def test_first_host_of_a_slurm_nodelist(nodelist, host):
    assert launch.first_host(nodelist) == host


def test_slurm_with_several_tasks_per_node_is_refused():
    env = {"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_PROCID": "0"}
    with pytest.raises(EffbenchError, match="ntasks-per-node=1"):
        launch.slurm_settings(env)


def test_outside_slurm_or_outside_srun_there_are_no_settings():
    assert launch.slurm_settings({}) is None
    assert launch.slurm_settings({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)"}) is None


@pytest.mark.parametrize(
    "kw, option",
    [
        (dict(visible_gpus=1, gpus=3), "--gpus"),
        (dict(device="cpu", gpus=2), "--gpus"),
        (dict(device="cuda", visible_gpus=0), "--device"),
        (dict(visible_gpus=2, nproc=2, device="cuda"), "--nproc"),
        (dict(device="cpu", strategy="dp"), "--strategy"),
        (dict(device="cpu", nproc=1, nnodes=2), "--rdzv-endpoint"),
        (dict(device="cpu", nproc=1, nnodes=2, rdzv_endpoint="hostonly"), "--rdzv-endpoint"),
        (dict(device="cpu", nproc=2, env={"OMP_NUM_THREADS": "lots"}), "OMP_NUM_THREADS"),
    ],
)
def test_bad_launch_requests_name_their_option(kw, option):
    with pytest.raises(EffbenchError) as info:
        plan(**kw)
    assert info.value.option == option


def test_too_many_gpus_says_what_is_visible_and_why():
    with pytest.raises(EffbenchError) as info:
        plan(visible_gpus=1, gpus=3, env={"CUDA_VISIBLE_DEVICES": "GPU-1234"})
    msg = str(info.value)
    assert (
        "3 GPUs requested but 1 visible" in msg and "CUDA_VISIBLE_DEVICES=GPU-1234" in msg and "--gpus-per-node" in msg
    )


@pytest.mark.parametrize("text, parsed", [("2", [2]), ("1,2,4", [1, 2, 4]), (" 1 , 8 ", [1, 8])])
def test_parse_counts(text, parsed):
    assert launch.parse_counts("--gpus", text) == parsed


@pytest.mark.parametrize("text", ["", "1,,2", "0", "-1", "two", "1,1", "1.5"])
def test_parse_counts_rejects(text):
    with pytest.raises(EffbenchError) as info:
        launch.parse_counts("--nproc", text)
    assert info.value.option == "--nproc"


@pytest.mark.parametrize(
    "text, parsed",
    [("node01:29500", ("node01", 29500)), ("127.0.0.1:1", ("127.0.0.1", 1)), ("[::1]:29400", ("::1", 29400))],
)
def test_parse_endpoint(text, parsed):
    assert launch.parse_endpoint(text) == parsed


@pytest.mark.parametrize("text", ["node01", "node01:", ":29500", "node01:99999", "a b:1", "node01:port"])
def test_parse_endpoint_rejects(text):
    with pytest.raises(EffbenchError, match="--rdzv-endpoint|HOST:PORT|out of range"):
        launch.parse_endpoint(text)


# --- a multi-node launch must name a rendezvous host every node can reach ---------------------------
PARTIAL_SLURM = [
    {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_PROCID": "0"},  # the red-team case: no node list
    {"SLURM_JOB_ID": "7", "SLURM_NNODES": "4", "SLURM_PROCID": "0", "SLURM_NODEID": "3"},
    {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": ""},
]


@pytest.mark.parametrize("env", PARTIAL_SLURM)
def test_a_slurm_allocation_without_a_node_list_names_no_host(env):
    assert launch.slurm_settings(env).rdzv_host is None


@pytest.mark.parametrize("env", PARTIAL_SLURM)
def test_a_partial_slurm_environment_is_one_line_error_not_a_wait(env, monkeypatch, capsys, tmp_path):
    from clitools import invoke

    for k in [k for k in __import__("os").environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = invoke(["run", "--smoke", "--output", tmp_path], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: --rdzv-endpoint:"), err
    assert "SLURM_JOB_NODELIST" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("endpoint", ["localhost:29500", "127.0.0.1:29400", "[::1]:29500"])
def test_node_agents_on_one_machine_may_meet_on_loopback(endpoint):
    assert plan(visible_gpus=4, nnodes=2, node_rank=0, rdzv_endpoint=endpoint).mode == "torchrun"


@pytest.mark.parametrize("endpoint", ["node01:29500", "10.0.0.7:29500", "127host:1", "localhost.example.org:2"])
def test_a_reachable_multi_node_rendezvous_is_accepted(endpoint):
    assert plan(visible_gpus=4, nnodes=2, node_rank=0, rdzv_endpoint=endpoint).mode == "torchrun"


def test_a_single_node_run_may_use_loopback():
    assert plan(device="cpu", nproc=2, rdzv_endpoint="127.0.0.1:29500").mode == "torchrun"


# --- a busy CPU before a run starts (issue 34) --------------------------------------------------------
def test_a_cpu_run_on_a_busy_machine_says_the_cause_and_the_wait_policy_once(monkeypatch, capsys, tmp_path):
    """`effbench run` on the CPU, the machine busier than its cores and OpenMP's threads spinning: one warning line
    with the load and OMP_WAIT_POLICY=PASSIVE before anything is timed; once per command (a sweep's cells)."""
    from effbench.config import RunConfig
    from effbench.run import launch as run_launch
    from effbench.system import hardware, preflight

    loads = []

    def busy():
        loads.append(1)
        return hardware.CpuLoad(load_1m=5.5, steal_pct=0.0, machine_cores=2, allowed_cores=2.0)

    monkeypatch.setattr(preflight, "run_checks", lambda _cfg: [])
    monkeypatch.setattr(hardware, "read_cpu_load", busy)
    monkeypatch.setattr(run_launch, "run_benchmark", lambda _cfg, **_kw: None)  # the patched leaf: nothing runs
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cfg = RunConfig(dataset="synthetic", device="cpu", weights="none", workers=0, output=tmp_path)
    said: set[str] = set()
    for _ in range(2):
        run_launch.run(cfg, command=["effbench"], said_warnings=said)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: load: load average 5.50 over the last minute on 2 cores")
    assert "(fix: OMP_WAIT_POLICY=PASSIVE before the command" in line and len(loads) == 1
    run_launch.run(cfg, command=["effbench"])  # a lone run: checked again
    assert capsys.readouterr().err.count("warning: load:") == 1
    # the fix already applied: nothing to offer, and the load is not even read (the verdict says what it did)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    run_launch.run(cfg, command=["effbench"])
    assert capsys.readouterr().err == "" and len(loads) == 2
    # an idle machine: nothing said
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(hardware, "read_cpu_load", lambda: hardware.CpuLoad(0.5, 0.0, 2, 2.0))
    run_launch.run(cfg, command=["effbench"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "dataset, loader, tail",
    [("cifar10", "auto", "_bs64"), ("cifar10", "fast", "_bs64"), ("food101", "dali", "_bs64_dali"),
     ("imagefolder", "torchvision", "_bs64_torchvision"), ("synthetic", "auto", "_bs64"),
     ("synthetic", "torchvision", "_bs64")],
)  # fmt: skip
def test_a_run_folder_names_a_loader_that_is_not_the_default(dataset, loader, tail):
    # issue 34: a DALI and a fast run of the same data differed only by their time; default names stay as they were
    import datetime as dt

    from effbench.config import RunConfig
    from effbench.run.folder import run_name

    device = "cuda" if loader == "dali" else "cpu"  # DALI runs on CUDA only (config refuses it on the CPU)
    cfg = RunConfig(dataset=dataset, loader=loader, arch="resnet18", batch_size=64, device=device)
    name = run_name(cfg, "cpu", "fp32", dt.datetime(2026, 11, 27, 1, 2, 3))
    assert name == f"20261127-010203_resnet18_{dataset}_cpu_fp32{tail}"
