"""The torchrun argv and the launch decision, as pure functions of config and environment."""

from __future__ import annotations

import dataclasses
import math

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


# --- issue 33 section 4: a job environment that cannot be followed is one line, before anything starts -----
SLURM_TWO = {
    "SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NTASKS_PER_NODE": "1",
}  # fmt: skip


@pytest.mark.parametrize(
    "env, option",
    [
        ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK"),  # the red-team case
        ({"RANK": "²"}, "RANK"),  # str.isdigit() says yes, int() says no
        ({"RANK": "-1"}, "RANK"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),  # not below its size
        ({"LOCAL_RANK": "one"}, "LOCAL_RANK"),
        ({"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_RANK"),
        ({"LOCAL_WORLD_SIZE": "1.5"}, "LOCAL_WORLD_SIZE"),
        ({"NODE_RANK": "0x1"}, "NODE_RANK"),
        ({"GROUP_RANK": " 1e3 "}, "GROUP_RANK"),
        ({**SLURM_TWO, "SLURM_NNODES": "two"}, "SLURM_NNODES"),
        ({**SLURM_TWO, "SLURM_NODEID": "2"}, "SLURM_NODEID"),  # node 2 of 2
        ({**SLURM_TWO, "SLURM_PROCID": "x"}, "SLURM_PROCID"),
        ({**SLURM_TWO, "SLURM_NTASKS_PER_NODE": "one"}, "SLURM_NTASKS_PER_NODE"),  # was silently ignored
        ({**SLURM_TWO, "SLURM_TASKS_PER_NODE": "4(x"}, "SLURM_TASKS_PER_NODE"),
        ({"PET_NODE_RANK": "first"}, "PET_NODE_RANK"),  # without PET_NNODES too
        ({"PET_NNODES": "2:x"}, "PET_NNODES"),
        ({"PET_NPROC_PER_NODE": "all"}, "PET_NPROC_PER_NODE"),
    ],
)
def test_a_rank_variable_that_is_not_a_number_is_refused_naming_it(env, option):
    with pytest.raises(EffbenchError) as info:
        launch.check_launch_env(env)
    assert info.value.option == option and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"RANK": "", "WORLD_SIZE": ""},  # empty reads as unset
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},  # a pod's torch variables
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
        },  # a torchrun rank's
        {"MASTER_PORT": "port"},  # read only where a rendezvous uses it (a multi-node launch: its own test)
        SLURM_TWO,
        {**SLURM_TWO, "PET_NNODES": "2", "PET_NODE_RANK": "1"},  # both schedulers, agreeing
        {**SLURM_TWO, "MASTER_ADDR": "gpu07.cluster.example"},  # the first node, by its long name
        {**SLURM_TWO, "MASTER_ADDR": "10.1.2.3"},  # an address: cannot be compared without a lookup
        {**SLURM_TWO, "WORLD_SIZE": "8", "RANK": "1"},  # `export WORLD_SIZE=$((SLURM_NNODES*4)) RANK=$SLURM_PROCID`
        {**SLURM_TWO, "WORLD_SIZE": "2"},  # `export WORLD_SIZE=$SLURM_NTASKS`
    ],
)
def test_a_job_environment_effbench_can_follow_passes(env):
    launch.check_launch_env(env)


@pytest.mark.parametrize(
    "change, option",
    [
        ({"PET_NNODES": "3"}, "PET_NNODES"),  # the red-team case: was silently ignored in favour of Slurm
        ({"PET_NNODES": "3:3"}, "PET_NNODES"),
        ({"PET_NODE_RANK": "0"}, "PET_NODE_RANK"),
        ({"PET_MASTER_ADDR": "bench-master-0"}, "PET_MASTER_ADDR"),
        ({"PET_MASTER_PORT": "29500"}, "PET_MASTER_PORT"),  # Slurm's is 20000 + 4242
        ({"MASTER_ADDR": "login01"}, "MASTER_ADDR"),
        ({"WORLD_SIZE": "3"}, "WORLD_SIZE"),  # 2 nodes cannot run 3 ranks evenly
    ],
)
def test_slurm_and_kubeflow_or_torch_variables_at_odds_are_one_line_naming_both(change, option):
    with pytest.raises(EffbenchError) as info:
        launch.check_launch_env({**SLURM_TWO, **change})
    assert info.value.option == option
    # the line names what it contradicts: Slurm's variable, or Slurm's rendezvous host, port or node count
    slurms = {"PET_NNODES": "SLURM_NNODES=2", "PET_NODE_RANK": "SLURM_NODEID=1", "PET_MASTER_PORT": "24242",
              "WORLD_SIZE": "SLURM_NNODES=2"}  # fmt: skip
    assert slurms.get(option, "gpu07") in info.value.message, info.value.message


def test_the_variables_are_at_odds_outside_a_job_step_too():
    """An sbatch script without srun: Slurm's node count beside Kubeflow's is still two jobs' worth."""
    with pytest.raises(EffbenchError) as info:
        launch.check_launch_env({"SLURM_JOB_ID": "1", "SLURM_NNODES": "2", "PET_NNODES": "3"})
    assert info.value.option == "PET_NNODES"


@pytest.mark.parametrize(
    "env, line",
    [
        ({"RANK": "abc"}, "error: RANK: 'abc' is not a whole number"),
        ({**SLURM_TWO, "PET_NNODES": "3"}, "error: PET_NNODES: PET_NNODES=3 but SLURM_NNODES=2"),
    ],
)
def test_the_run_command_refuses_them_before_anything_starts(env, line, monkeypatch, capsys, tmp_path):
    import os

    from clitools import invoke

    from effbench.run import launch as run_launch
    from effbench.sweep import series

    def never(*_a, **_k):
        raise AssertionError("nothing may start")

    monkeypatch.setattr(run_launch, "run", never)
    monkeypatch.setattr(series, "run_scaling_series", never)
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_")) or k in launch.LAUNCHER_VARS]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = invoke(["run", "--smoke", "--nproc", "1,2", "--output", tmp_path], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(line), err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_a_child_gets_none_of_the_jobs_launcher_variables():
    pod = {
        "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1", "NODE_RANK": "1",
        "MASTER_ADDR": "bench-master-0", "MASTER_PORT": "23456", "PET_NNODES": "2", "PET_NODE_RANK": "1",
        "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "0",
    }  # fmt: skip
    kept = {"PATH": "/usr/bin", "SLURM_JOB_ID": "7", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0", "HOME": "/h"}
    env = launch.child_env({**pod, **kept}, {"OMP_NUM_THREADS": "4"})
    assert env == {**kept, "OMP_NUM_THREADS": "4"}
    # what torchrun sets for the ranks it starts (torch/distributed/elastic/agent/server/local_elastic_agent.py)
    assert {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"} <= set(launch.LAUNCHER_VARS)


@pytest.mark.parametrize(
    "env, expected",
    [
        (SLURM_TWO, ("SLURM_JOB_NODELIST", "SLURM_JOB_ID")),
        ({**SLURM_TWO, "MASTER_PORT": "31000"}, ("SLURM_JOB_NODELIST", "MASTER_PORT")),
        ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "gpu07", "PET_MASTER_PORT": "24242"},
         ("PET_MASTER_ADDR", "PET_MASTER_PORT")),
        ({}, ("--rdzv-endpoint", "--rdzv-endpoint")),
    ],
)  # fmt: skip
def test_the_rendezvous_names_where_it_came_from(env, expected):
    assert launch.rendezvous_source("gpu07:24242" if "MASTER_PORT" not in env else "gpu07:31000", env) == expected


# --- the rendezvous host resolves and answers before torchrun starts (system/preflight.py) -----------------
def _rdzv_probes(
    *, resolves=("10.0.0.7",), problem=None, local=False, knocks=("answered", "refused: nothing listens yet")
):
    from effbench.system.preflight import Probes, Resolved

    seen: list = []

    def knock(address, port):
        seen.append((address, port))
        return knocks

    probes = Probes(
        resolve=lambda host: Resolved(() if problem else tuple(resolves), problem),
        local_address=lambda a: local,
        knock=knock,
    )
    return probes, seen


def _rdzv_cfg(endpoint="gpu07:24242", nnodes=2):
    from effbench.config import RunConfig

    return RunConfig(dataset="synthetic", device="cpu", nnodes=nnodes, node_rank=nnodes - 1, rdzv_endpoint=endpoint)


def test_an_unresolvable_slurm_host_is_one_error_naming_the_host_and_its_variable():
    from effbench.system.preflight import check_rendezvous_host

    env = {**SLURM_TWO, "SLURM_JOB_NODELIST": "n1"}  # the red-team case: n1 names no host here
    probes, knocked = _rdzv_probes(problem="Name or service not known")
    (f,) = check_rendezvous_host(_rdzv_cfg("n1:24242"), env, probes)
    assert (f.level, f.option) == ("error", "SLURM_JOB_NODELIST")
    assert "'n1'" in f.message and "SLURM_JOB_NODELIST=n1" in f.message and "Name or service not known" in f.message
    assert knocked == []  # nothing to knock on


@pytest.mark.parametrize(
    "env, endpoint, option",
    [
        ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "bench-master-0", "PET_MASTER_PORT": "23456"},
         "bench-master-0:23456", "PET_MASTER_ADDR"),
        ({"PET_NNODES": "2", "PET_NODE_RANK": "1", "MASTER_ADDR": "bench-master-0", "MASTER_PORT": "23456"},
         "bench-master-0:23456", "MASTER_ADDR"),
        ({}, "nosuchnode.invalid:29500", "--rdzv-endpoint"),
        (SLURM_TWO, "other:29500", "--rdzv-endpoint"),  # --rdzv-endpoint given beside Slurm's: the option's
    ],
)  # fmt: skip
def test_an_unresolvable_host_names_where_it_came_from(env, endpoint, option):
    from effbench.system.preflight import check_rendezvous_host

    probes, _ = _rdzv_probes(problem="Name or service not known")
    (f,) = check_rendezvous_host(_rdzv_cfg(endpoint), env, probes)
    assert (f.level, f.option) == ("error", option)


@pytest.mark.parametrize(
    "local, knocks, level",
    [
        (True, None, "ok"),  # this node hosts the store: its port is not tried (a store of this job may hold it)
        (False, ("answered", "open"), "ok"),
        (False, ("answered", "refused: nothing listens yet"), "ok"),  # the host's torchrun has not started yet
        (False, ("unreachable", "No route to host"), "error"),
        (False, ("silent", "no answer within 3 s"), "warning"),  # a firewall that drops, or a slow network
    ],
)
def test_the_port_is_tried_from_a_node_that_does_not_host_the_store(local, knocks, level):
    from effbench.system.preflight import check_rendezvous_host

    probes, knocked = _rdzv_probes(local=local, knocks=knocks)
    (f,) = check_rendezvous_host(_rdzv_cfg(), SLURM_TWO, probes)
    assert f.level == level
    assert knocked == ([] if local else [("10.0.0.7", 24242)])
    if level != "ok":
        assert "gpu07:24242" in f.message and "SLURM_JOB_NODELIST" in f.message and "SLURM_JOB_ID" in f.message


def test_a_single_node_run_looks_nothing_up():
    from effbench.system.preflight import check_rendezvous_host

    probes, _ = _rdzv_probes(problem="must not be asked")
    assert check_rendezvous_host(_rdzv_cfg(nnodes=1), {}, probes) == []
    assert check_rendezvous_host(_rdzv_cfg(endpoint=None, nnodes=1), {}, probes) == []


def test_a_resolver_that_does_not_answer_is_bounded(monkeypatch):
    import socket
    import threading
    import time

    from effbench.system import preflight

    release = threading.Event()

    def hangs(*_a, **_k):  # a name server that never answers (glibc waits resolv.conf's timeout x attempts)
        release.wait(30)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hangs)
    t0 = time.monotonic()
    try:
        got = preflight.resolve_host("n1", timeout_s=0.3)
    finally:
        release.set()
    assert time.monotonic() - t0 < 5
    assert got.addresses == () and "no answer from the resolver within 0.3 s" in got.problem


def test_the_real_probes_agree_with_this_machine():
    """Loopback is this node's; a refused port on it is an answer (nothing sent, nothing listening)."""
    import socket

    from effbench.system import preflight

    assert preflight.resolve_host("localhost").addresses
    assert preflight.is_local_address("127.0.0.1") and not preflight.is_local_address("192.0.2.1")  # TEST-NET-1
    with socket.socket() as s:  # a port that was free a moment ago, now closed: refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert preflight.knock("127.0.0.1", port)[0] == "answered"


def test_the_run_command_stops_on_an_unresolvable_slurm_host_before_torchrun(monkeypatch, capsys, tmp_path):
    """The red-team case end to end in this process, the leaf patched: getaddrinfo says n1 does not exist."""
    import os
    import socket

    from clitools import invoke

    from effbench.launch import supervise

    real = socket.getaddrinfo

    def no_n1(host, *a, **k):
        if host == "n1":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *a, **k)

    def never(*_a, **_k):
        raise AssertionError("torchrun must not start")

    monkeypatch.setattr(socket, "getaddrinfo", no_n1)
    monkeypatch.setattr(supervise, "run_supervised", never)
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_")) or k in launch.LAUNCHER_VARS]:
        monkeypatch.delenv(k)
    for k, v in {**SLURM_TWO, "SLURM_JOB_NODELIST": "n1"}.items():
        monkeypatch.setenv(k, v)
    code, out, err = invoke(["run", "--smoke", "--output", tmp_path / "out"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: SLURM_JOB_NODELIST: the rendezvous host 'n1'") and "does not resolve" in err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


# --- a failed child's cause reaches the terminal (launch/supervise.py) ------------------------------------
# What torchrun 2.14 printed when node 1 could not reach its rendezvous host n1 (torch.distributed.run
# --nnodes 2 --rdzv-endpoint n1:24242 --rdzv-conf read_timeout=5 on this machine), cut to its shape: c10d's C++
# log lines, a C++ exception's stack, then the Python traceback chain.
RDZV_FAILURE = """\
node_rank is only used for static rdzv_backend. It will be ignored for rdzv_backend=c10d.
[W1127 00:32:21.720287122 socket.cpp:764] [c10d] The IPv6 network addresses of (n1, 24242) cannot be retrieved (gai error: -2 - Name or service not known).
[E1127 00:32:26.508025788 socket.cpp:1028] [c10d] The client socket has timed out after 5000ms while trying to connect to (n1, 24242).
Exception raised from throwTimeoutError at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/socket.cpp:1030 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >) + 0x9d (0x7f45dbf5e60d in libc10.so)
<omitting python frames>
frame #39: _start + 0x21 (0x55ed6f513081 in /work/main/.venv/bin/python)

Traceback (most recent call last):
  File "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 156, in _create_tcp_store
    store = TCPStore(
            ^^^^^^^^^
torch.distributed.DistNetworkError: The client socket has timed out after 5000ms while trying to connect to (n1, 24242).

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 180, in _create_tcp_store
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
""".splitlines(keepends=True)


def test_the_last_meaningful_line_of_a_failed_rendezvous_names_the_host():
    from effbench.launch.supervise import last_meaningful_line

    assert last_meaningful_line(RDZV_FAILURE) == (
        "RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details. "
        "(DistNetworkError: The client socket has timed out after 5000ms while trying to connect to (n1, 24242).)"
    )


@pytest.mark.parametrize(
    "text, line",
    [
        ('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
         "ValueError: invalid literal for int() with base 10: 'abc'\n",
         "ValueError: invalid literal for int() with base 10: 'abc'"),  # the isolated worker's RANK=abc
        ("epoch 1/1 step 1/9\nKilled by the kernel\n", "Killed by the kernel"),  # no traceback: the last plain line
        ("frame #0: x + 0x1 (0x1 in a.so)\n[W1127 00:32:21.720287122 socket.cpp:764] [c10d] x\n", None),
        ("", None),
        ("RuntimeError: " + "x" * 1000 + "\n", "RuntimeError: " + "x" * 383 + "..."),
    ],
)  # fmt: skip
def test_the_last_meaningful_line_skips_frames_and_logger_lines(text, line):
    from effbench.launch.supervise import last_meaningful_line

    assert last_meaningful_line(text.splitlines(keepends=True)) == line


def test_c10d_log_lines_and_cpp_frames_stay_off_the_terminal():
    from effbench.launch.supervise import TRACEBACK_START, for_terminal

    shown, after = [], False
    for line in RDZV_FAILURE:  # as run_supervised's reader goes through torchrun's stderr
        after = after or line.startswith(TRACEBACK_START)
        if for_terminal(line, after_traceback=after):
            shown.append(line)
    assert shown == [RDZV_FAILURE[0], "\n"]  # torchrun's own notice; the rest is in the log


def test_a_node_without_results_says_why_its_child_failed():
    from effbench.launch.supervise import SupervisedResult
    from effbench.run import record

    why = "ValueError: invalid literal for int() with base 10: 'abc'"
    got = record.record_without_results(SupervisedResult(1, None, None, last_line=why), [], "the effbench worker")
    assert got.status == "failed" and got.error.message == f"the effbench worker exited with 1: {why}"
    stopped = record.record_without_results(SupervisedResult(143, 15, None, last_line=why), [], "torchrun")
    assert stopped.status == "interrupted" and stopped.error.message == "torchrun exited with 143"  # the signal's doing


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


def test_a_cpu_run_with_more_processes_than_cores_says_so_once_before_it_starts(monkeypatch, capsys, tmp_path):
    """issue 46: `--nproc 8` on 2 cores started with no word; its 8 ranks of 1 thread take turns on the cores."""
    from effbench.config import RunConfig
    from effbench.run import launch as run_launch
    from effbench.system.hardware import allowed_cores, usable_cores

    started = []
    monkeypatch.setattr(run_launch, "_run_in_child", lambda *_a, **_kw: started.append(1))  # nothing runs
    monkeypatch.setattr(run_launch, "run_benchmark", lambda *_a, **_kw: started.append(1))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # the load warning is another test's
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = usable_cores()
    cfg = RunConfig(dataset="synthetic", device="cpu", weights="none", workers=0, output=tmp_path, nproc=cores + 1)
    said: set[str] = set()
    for _ in range(2):
        run_launch.run(cfg, command=["effbench"], said_warnings=said)
    lines = [line for line in capsys.readouterr().err.splitlines() if "--nproc" in line]
    allowed = allowed_cores()
    assert lines == [
        f"warning: threads: --nproc {cores + 1} runs {cores + 1} process(es) x 1 thread(s) = {cores + 1} threads on "
        f"{allowed:g} CPU cores: they take turns on the cores, so the figures measure that (fix: --nproc "
        f"{math.ceil(allowed)} or fewer (each process gets the cores / N threads))"
    ]
    assert started == [1, 1]  # a warning: the run goes ahead
    run_launch.run(dataclasses.replace(cfg, nproc=None), command=["effbench"])
    assert "warning: threads" not in capsys.readouterr().err and started == [1, 1, 1]
