"""In a container or not: read from the mount table and PID 1's cgroup, /.dockerenv only a hint.

The tables are proc(5) mountinfo lines as the kernel writes them; each case names where it was seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from effbench.config import RunConfig
from effbench.system import preflight
from effbench.system.hardware import container_runtime
from effbench.system.mounts import container_signs

# A cloud VM (this CI machine's own table, trimmed): root is the virtio disk, /etc is plain files.
VM = """22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684092k"""
# Docker 27 on overlay2 (cgroup v2 with a cgroup namespace: PID 1's cgroup reads 0::/).
DOCKER = """1200 1100 0:50 / / rw,relatime master:9 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A
1210 1200 8:1 /var/lib/docker/containers/abc/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/sda1 rw
1211 1200 8:1 /var/lib/docker/containers/abc/hostname /etc/hostname rw,relatime - ext4 /dev/sda1 rw
1212 1200 8:1 /var/lib/docker/containers/abc/hosts /etc/hosts rw,relatime - ext4 /dev/sda1 rw"""
# Docker with the btrfs storage driver: root is a btrfs subvolume, not an overlay; the engine's binds remain.
DOCKER_BTRFS = """900 800 0:44 /@/var/lib/docker/btrfs/subvolumes/abc / rw - btrfs /dev/sda2 rw
910 900 0:44 /@/var/lib/docker/containers/abc/hostname /etc/hostname rw - btrfs /dev/sda2 rw"""
HOST_CGROUP_V2 = "0::/init.scope\n"
DOCKER_CGROUP_V1 = "12:cpu,cpuacct:/docker/0123abcd\n11:memory:/docker/0123abcd\n"


def fake_root(tmp_path: Path, *, dockerenv=True, mountinfo=None, cgroup=None) -> Path:
    root = tmp_path / "root"
    root.mkdir(parents=True)
    if dockerenv:
        (root / ".dockerenv").touch()
    if mountinfo is not None:
        (root / "proc" / "self").mkdir(parents=True)
        (root / "proc" / "self" / "mountinfo").write_text(mountinfo + "\n")
    if cgroup is not None:
        (root / "proc" / "1").mkdir(parents=True)
        (root / "proc" / "1" / "cgroup").write_text(cgroup)
    return root


@pytest.mark.parametrize(
    ("mountinfo", "cgroup", "runtime"),
    [
        (VM, HOST_CGROUP_V2, "none"),  # /.dockerenv left in a VM image: a host
        (DOCKER, "0::/\n", "docker"),
        (DOCKER_BTRFS, "0::/\n", "docker"),  # no overlay, but the engine's /etc/hostname
        (VM.replace("ext4", "xfs"), DOCKER_CGROUP_V1, "docker"),  # cgroup v1 names the container
        (None, None, "docker"),  # nothing to read: the hint stands, as before
    ],
)
def test_dockerenv_counts_only_with_a_container_mount_table_or_cgroup(tmp_path, mountinfo, cgroup, runtime):
    root = fake_root(tmp_path, mountinfo=mountinfo, cgroup=cgroup)
    assert container_runtime(root, environ={}) == runtime


def test_podman_is_named_by_its_environment_too(tmp_path):
    root = fake_root(tmp_path, dockerenv=False, mountinfo=VM, cgroup=HOST_CGROUP_V2)
    assert container_runtime(root, environ={}) == "none"
    assert container_runtime(root, environ={"container": "podman"}) == "podman"


def test_container_signs_name_what_they_saw():
    assert container_signs(VM, HOST_CGROUP_V2, {}, False) == []
    assert container_signs("", None, {}, False) is None  # an empty or unreadable table decides nothing
    signs = container_signs(DOCKER, "0::/\n", {}, False)
    assert signs == [
        "/ is an overlay of image layers",
        "/etc/hostname, /etc/hosts, /etc/resolv.conf mounted by the engine",
    ]
    assert container_signs(VM, DOCKER_CGROUP_V1, {}, False) == ["PID 1's cgroup 12:cpu,cpuacct:/docker/0123abcd"]


def test_no_output_mount_warning_on_a_host_that_is_not_a_container(tmp_path):
    """The VM above keeps /.dockerenv; its /results is on the disk and outlives everything: no warning,
    before the run (preflight) or after it (output_loss_warning)."""
    root = fake_root(tmp_path, mountinfo=VM, cgroup=HOST_CGROUP_V2)
    c = RunConfig(dataset="synthetic", device="cpu", workers=0, output=Path("/results"), data_dir=tmp_path / "data")
    probes = preflight.Probes(writable=lambda p: None, mountinfo=lambda: VM)
    findings = preflight.run_checks(c, env={}, root=root, probes=probes)
    assert [f for f in findings if f.check == "output-mount"] == []
    assert preflight.output_loss_warning(Path("/results"), env={}, root=root) is None
    # the same table under Docker (an overlay root) warns: the check itself still runs in a container
    docker = fake_root(tmp_path / "d", mountinfo=DOCKER, cgroup="0::/\n")
    probes = preflight.Probes(writable=lambda p: None, mountinfo=lambda: DOCKER)
    (w,) = [f for f in preflight.run_checks(c, env={}, root=docker, probes=probes) if f.check == "output-mount"]
    assert w.level == "warning" and "lost" in w.message
