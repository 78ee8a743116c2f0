"""The machine a run names (system/machine.py): a container's made-up hostname is replaced by what does not change
between containers on one box. Expected names are spelled out here from the rules in docs/sweeps-and-reports.md."""

from __future__ import annotations

import pytest

from clitools import invoke

from effbench.errors import EffbenchError
from effbench.system import hardware
from effbench.system import machine as m

H100_A = "8c1d2e3f-0a1b-2c3d-4e5f-60718293a4b5"
H100_B = "1f2e3d4c-5b6a-7988-0a1b-2c3d4e5f6071"
BOOT = "4F3a2b1c-9d8e-4f70-a1b2-c3d4e5f60718"


def test_a_named_machine_wins_over_everything():
    assert m.identify("3f2a9c1b7d0e", "docker", [H100_A], BOOT, named="dgx-07") == m.Machine(
        "dgx-07", "EFFBENCH_MACHINE"
    )


@pytest.mark.parametrize(
    ("host", "runtime"),
    [
        ("node-a", "docker"),  # docker run --hostname node-a
        ("3f2a9c1b7d0e", "none"),  # a bare host that happens to be named in hex
        ("3f2a9c1b7d0e", "apptainer"),  # apptainer keeps the host's name
        ("3F2A9C1B7D0E", "docker"),  # engines write lowercase hex
        ("3f2a9c1b7d0", "podman"),  # 11 digits: not a container id's 12
        ("3f2a9c1b7d0e0", "podman"),  # 13
    ],
)
def test_a_hostname_the_engine_did_not_make_up_names_the_machine(host, runtime):
    assert m.identify(host, runtime, [H100_A], BOOT) == m.Machine(host, "hostname")


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_a_generated_hostname_gives_way_to_the_gpus_then_the_boot_id(runtime):
    host = "3f2a9c1b7d0e"
    assert m.identify(host, runtime, [H100_A], BOOT) == m.Machine("GPU-8c1d2e3f", "GPU UUIDs")
    # NVML's spelling and torch's name one GPU alike; the lowest UUID leads whatever the order, +3 for the rest
    four = ["GPU-" + H100_A, H100_B, "MIG-" + H100_A[:-1] + "6", H100_A[:-1] + "7"]
    assert m.identify(host, runtime, four, BOOT) == m.Machine("GPU-1f2e3d4c+3", "GPU UUIDs")
    assert m.identify(host, runtime, [], BOOT) == m.Machine("boot-4f3a2b1c", "host boot id")
    assert m.identify(host, runtime, [None, " "], None) == m.Machine(host, "hostname")  # nothing else is known


def test_a_pods_hostname_is_the_pods_so_the_gpus_or_the_boot_id_name_the_node():
    # a PyTorchJob's master pod is effbench-master-0 for every job named effbench, on whatever node it lands
    assert m.in_pod({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}) and not m.in_pod({})
    assert m.identify("effbench-master-0", "none", [H100_A], BOOT, pod=True) == m.Machine("GPU-8c1d2e3f", "GPU UUIDs")
    assert m.identify("effbench-master-0", "none", [], BOOT, pod=True) == m.Machine("boot-4f3a2b1c", "host boot id")
    assert m.identify("effbench-master-0", "none", [], BOOT, named="gpu-node-3", pod=True).name == "gpu-node-3"


def test_nothing_known_is_no_machine():
    assert m.identify(None, None) is None
    assert m.identify("", "docker", [], "") is None


def test_effbench_machine_empty_is_unset_and_a_bad_one_is_refused_in_one_line():
    assert m.given_name({}) is None
    assert m.given_name({"EFFBENCH_MACHINE": "  "}) is None
    assert m.given_name({"EFFBENCH_MACHINE": " rack 3 / node 7 "}) == "rack 3 / node 7"
    for bad in ("node\x1b[2J", "a\nb", "x" * 101):
        with pytest.raises(EffbenchError) as e:
            m.given_name({"EFFBENCH_MACHINE": bad})
        assert e.value.option == "EFFBENCH_MACHINE" and "\n" not in str(e.value)


def test_the_boot_id_is_read_from_the_kernels_file(tmp_path):
    f = tmp_path / "boot_id"
    f.write_text(BOOT + "\n")
    assert m.read_boot_id(f) == BOOT
    assert m.read_boot_id(tmp_path / "absent") is None
    f.write_bytes(b"\xff\xfe")
    assert m.read_boot_id(f) is None


def test_env_json_records_the_machine_and_where_its_name_came_from(monkeypatch):
    monkeypatch.setenv("EFFBENCH_MACHINE", "bench-box-1")
    snap = hardware.env_snapshot()
    assert (snap["machine"], snap["machine_source"]) == ("bench-box-1", "EFFBENCH_MACHINE")
    assert snap["host_boot_id"] == m.read_boot_id()
    monkeypatch.delenv("EFFBENCH_MACHINE")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(hardware, "container_runtime", lambda: "docker")
    monkeypatch.setattr(hardware.socket, "gethostname", lambda: "3f2a9c1b7d0e")
    monkeypatch.setattr(m, "read_boot_id", lambda: BOOT)
    snap = hardware.env_snapshot()
    assert (snap["hostname"], snap["machine"], snap["machine_source"]) == (
        "3f2a9c1b7d0e",
        "boot-4f3a2b1c",  # this machine has no GPU: the boot id tells it
        "host boot id",
    )
    monkeypatch.setattr(hardware, "container_runtime", lambda: "none")
    monkeypatch.setattr(hardware.socket, "gethostname", lambda: "effbench-master-0")
    assert hardware.env_snapshot()["machine"] == "effbench-master-0"  # a host of that name
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert hardware.env_snapshot()["machine"] == "boot-4f3a2b1c"  # a pod of that name


@pytest.mark.parametrize("command", [["run", "--smoke"], ["sweep", "--smoke", "--batch-size", "4,8"]])
def test_run_and_sweep_refuse_a_bad_machine_name_before_anything_runs(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EFFBENCH_MACHINE", "node\x1b[2J7")
    code, out, err = invoke([*command, "--output", tmp_path / "out"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "EFFBENCH_MACHINE" in err and "\x1b" not in err and "printable" in err
    assert not (tmp_path / "out").exists()  # nothing that looks like a result


def test_the_run_page_shows_the_machine_beside_a_made_up_hostname():
    from effbench import schema
    from effbench.report import html

    env = schema.Env(hostname="3f2a9c1b7d0e", container_runtime="docker", machine="GPU-8c1d2e3f",
                     machine_source="GPU UUIDs")  # fmt: skip
    pairs = dict(html.environment_pairs(env))
    assert (pairs["host"], pairs["machine"]) == ("3f2a9c1b7d0e", "GPU-8c1d2e3f (from GPU UUIDs)")
    assert dict(html.environment_pairs(schema.Env(hostname="old"))).get("machine") is None  # an older env.json
