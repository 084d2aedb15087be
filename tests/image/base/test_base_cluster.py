"""What a node of a cluster needs from the image: rdma-core's userland that NCCL opens for InfiniBand and
RoCE, NCCL built with its IB transport, and the variables through which the NVIDIA Container Toolkit
exposes GPUs and checks the driver."""

from __future__ import annotations

from typing import Any

from tests.image.utils import docker

LOAD_RDMA = ("python -c \"import ctypes; [ctypes.CDLL(n) for n in ('libibverbs.so.1', 'librdmacm.so.1')]; "
             "print('loaded')\"")
# The NCCL torch loads (the nvidia-nccl wheel's in the venv; NGC's system one), and the marker of its IB
# transport in the library's strings ("NET/IB : ..." log lines are compiled in with the transport).
NCCL_IB = ("python - <<'EOF'\n"
           "import glob, sys\n"
           "paths = sorted(glob.glob(sys.prefix + '/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2')"
           " + glob.glob('/usr/lib/*/libnccl.so.2*') + glob.glob('/usr/local/lib/python3*/dist-packages/nvidia/"
           "nccl/lib/libnccl.so.2'))\n"
           "print(paths[0] if paths else 'none', any(b'NET/IB' in open(p, 'rb').read() for p in paths[:1]))\n"
           "EOF")


def test_rdma_userland_loads(host: Any) -> None:
    result = host.run(LOAD_RDMA)
    assert result.rc == 0 and result.stdout.strip() == "loaded", (
        f"libibverbs.so.1 / librdmacm.so.1 do not load: NCCL would use TCP sockets between nodes\n{result.stderr}")
    providers = host.run("ls /usr/lib/*/libibverbs/ 2>/dev/null").stdout.split()
    assert any(p.startswith("libmlx5") for p in providers), f"no mlx5 verbs provider: {providers}"
    assert host.run("command -v ibv_devinfo").rc == 0, "ibv_devinfo (ibverbs-utils) is missing"


def test_nccl_has_its_ib_transport(host: Any) -> None:
    result = host.run(NCCL_IB)
    path, has_ib = result.stdout.split()
    assert path != "none", f"no libnccl.so.2 found: {result.stderr}"
    assert has_ib == "True", f"{path} has no NET/IB transport compiled in"


def test_the_container_toolkit_sees_gpus_and_the_cuda_requirement(image: docker.ImageInfo) -> None:
    env = image.env
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "all", env.get("NVIDIA_VISIBLE_DEVICES")
    capabilities = set((env.get("NVIDIA_DRIVER_CAPABILITIES") or "").split(","))
    assert {"compute", "utility"} <= capabilities or "all" in capabilities, capabilities
    cuda = image.label("cuda")
    assert (env.get("NVIDIA_REQUIRE_CUDA") or "").startswith(f"cuda>={cuda}"), (
        f"NVIDIA_REQUIRE_CUDA={env.get('NVIDIA_REQUIRE_CUDA')!r}, the image's CUDA is {cuda}")
