"""The cluster checks made to pass and to fail in a fake node: /sys, /dev, /proc and a library loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcore_images.doctor import checks_cluster, probes
from mcore_images.doctor.model import REGISTRY, Context, Status, run_one


class Node:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        for d in ("proc/self", "sys/class/net", "dev"):
            (tmp / d).mkdir(parents=True)
        self.environ: dict[str, str] = {}
        self.missing: set[str] = set()
        self.limits("unlimited")
        self.mounts(None)
        self.nic("lo", "eth0")
        self.gpus = 0
        monkeypatch.setattr(probes, "gpu_info", lambda ctx: probes.GpuInfo(
            None, None, tuple(probes.Gpu(i, "H200", 90) for i in range(self.gpus)), None))

    def limits(self, memlock: str) -> None:
        (self.tmp / "proc/self/limits").write_text(
            "Limit                     Soft Limit           Hard Limit           Units\n"
            f"Max locked memory         {memlock}            {memlock}            bytes\n")

    def mounts(self, shm: str | None) -> None:
        line = f"shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size={shm} 0 0\n" if shm else ""
        (self.tmp / "proc/self/mounts").write_text("overlay / overlay rw 0 0\n" + line)

    def nic(self, *names: str) -> None:
        for name in names:
            (self.tmp / "sys/class/net" / name).mkdir()

    def hca(self, name: str, state: str = "4: ACTIVE", layer: str = "InfiniBand", uverbs: bool = True) -> None:
        port = self.tmp / "sys/class/infiniband" / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "link_layer").write_text(layer + "\n")
        if uverbs:
            (self.tmp / "dev/infiniband").mkdir(exist_ok=True)
            (self.tmp / "dev/infiniband" / f"uverbs{len(list((self.tmp / 'dev/infiniband').iterdir()))}").touch()

    def run(self, check_id: str) -> tuple[Status, str]:
        ctx = Context(environ=self.environ, proc=self.tmp / "proc", sys_dir=self.tmp / "sys", dev=self.tmp / "dev",
                      load_library=lambda name: f"{name}: cannot open" if name in self.missing else None)
        finding = run_one(REGISTRY[check_id], ctx)
        return finding.status, finding.finding


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def test_rdma_libraries(node: Node) -> None:
    assert node.run("cluster.rdma-libs")[0] == Status.OK
    node.missing = {"libibverbs.so.1"}
    assert node.run("cluster.rdma-libs")[0] == Status.WARN  # one node: only a warning
    node.hca("mlx5_0")
    status, text = node.run("cluster.rdma-libs")
    assert status == Status.FAIL and "falls back to TCP sockets" in text


def test_what_nccl_would_pick(node: Node) -> None:
    assert node.run("cluster.nccl-transport")[0] == Status.SKIP  # no devices: sockets
    node.hca("mlx5_0")
    node.hca("mlx5_1", state="1: DOWN")
    assert node.run("cluster.nccl-transport") == (Status.OK, "NCCL would use IB/RoCE on mlx5_0:1")
    node.environ["NCCL_IB_DISABLE"] = "1"
    assert node.run("cluster.nccl-transport")[0] == Status.WARN
    node.environ.clear()
    for dev in (node.tmp / "dev/infiniband").iterdir():
        dev.unlink()
    status, text = node.run("cluster.nccl-transport")
    assert status == Status.WARN and "not given the devices" in text


def test_nccl_interface_and_hca_names(node: Node) -> None:
    node.hca("mlx5_0")
    assert node.run("cluster.nccl-names")[0] == Status.SKIP
    node.environ.update(NCCL_SOCKET_IFNAME="eth", NCCL_IB_HCA="mlx5_0:1")
    assert node.run("cluster.nccl-names") == (Status.OK, "NCCL_SOCKET_IFNAME selects eth0; NCCL_IB_HCA selects mlx5_0")
    node.environ["NCCL_SOCKET_IFNAME"] = "^lo,eth"
    status, text = node.run("cluster.nccl-names")
    assert status == Status.FAIL and "NCCL_SOCKET_IFNAME=^lo,eth matches no network interface here" in text
    node.environ.update(NCCL_SOCKET_IFNAME="=eth0", NCCL_IB_HCA="ib0")
    status, text = node.run("cluster.nccl-names")
    assert status == Status.FAIL and "NCCL_IB_HCA=ib0 matches no RDMA device here (have: mlx5_0)" in text


def test_a_named_net_plugin_must_load(node: Node) -> None:
    node.missing = {"libnccl-net.so", "libnccl-net-ofi.so"}
    assert node.run("cluster.nccl-net-plugin")[0] == Status.OK
    node.environ["NCCL_NET_PLUGIN"] = "ofi"
    status, text = node.run("cluster.nccl-net-plugin")
    assert status == Status.FAIL and "libnccl-net-ofi.so does not load" in text


def test_shm_against_the_ranks_of_the_node(node: Node) -> None:
    assert node.run("cluster.shm")[0] == Status.OK  # no size of its own (--ipc=host)
    node.mounts("65536k")
    status, text = node.run("cluster.shm")
    assert status == Status.FAIL and "Docker's default: the container was started without --ipc=host" in text
    node.mounts("16g")
    node.gpus = 8
    assert node.run("cluster.shm")[0] == Status.OK
    node.mounts("2g")
    status, text = node.run("cluster.shm")
    assert status == Status.FAIL and "8 rank(s) here need 4.0 GiB" in text


def test_memlock(node: Node) -> None:
    assert node.run("cluster.memlock") == (Status.OK, "memlock unlimited")
    node.limits("8388608")
    assert node.run("cluster.memlock")[0] == Status.WARN
    node.hca("mlx5_0")
    status, text = node.run("cluster.memlock")
    assert status == Status.FAIL and "memlock limited to 8 MiB on a node with RDMA devices" in text


def test_interface_lists_follow_nccls_syntax() -> None:
    names = ["eth0", "eth1", "ib0", "lo"]
    assert checks_cluster._matches("eth", names) == ["eth0", "eth1"]
    assert checks_cluster._matches("=eth", names) == []
    assert checks_cluster._matches("^lo,ib", names) == ["eth0", "eth1"]
