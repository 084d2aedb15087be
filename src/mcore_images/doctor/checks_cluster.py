"""What breaks multi-process and multi-node training in containers: RDMA userland and devices, the
network NCCL would pick, /dev/shm, the memlock limit.

Each reads the machine through the Context (``/proc/self/limits``, ``/proc/self/mounts``,
``/sys/class/infiniband``, ``/sys/class/net``, ``/dev/infiniband``, a library loader), so the tests
point it at a fake world. Only one node's view: whether the nodes reach each other is the smoke's job.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip, warn

RDMA_LIBRARIES = ("libibverbs.so.1", "librdmacm.so.1")
"""rdma-core's userland: NCCL's IB/RoCE transport opens libibverbs at run time (and falls back to TCP
sockets, silently, where it cannot)."""
GIB = 1024**3
MIB = 1024**2
DOCKER_DEFAULT_SHM = 64 * MIB
SHM_PER_RANK = 512 * MIB
"""Per rank on a node: NCCL's shared-memory transport keeps buffers per peer pair (NCCL_BUFFSIZE, 4 MiB, per
channel and protocol) and a DataLoader's workers pass batches through /dev/shm; Docker's 64 MiB default
ends 8-GPU jobs with NCCL's 'unhandled system error' or a bus error."""


def ib_devices(ctx: Context) -> dict[str, list[tuple[str, str, str]]]:
    """{device: [(port, state, link layer)]} from /sys/class/infiniband."""
    root = ctx.sys_dir / "class" / "infiniband"
    devices: dict[str, list[tuple[str, str, str]]] = {}
    for dev in sorted(root.iterdir()) if root.is_dir() else []:
        ports = []
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:
            state = _read(port / "state").split(":")[-1].strip() or "?"
            layer = _read(port / "link_layer") or "?"
            ports.append((port.name, state, layer))
        devices[dev.name] = ports
    return devices


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def net_interfaces(ctx: Context) -> list[str]:
    root = ctx.sys_dir / "class" / "net"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def uverbs(ctx: Context) -> list[str]:
    """The verbs character devices a container was given (``--device /dev/infiniband`` or a device plugin)."""
    root = ctx.dev / "infiniband"
    return sorted(p.name for p in root.iterdir() if p.name.startswith("uverbs")) if root.is_dir() else []


def active_ports(ctx: Context) -> list[str]:
    return [f"{dev}:{port}" for dev, ports in ib_devices(ctx).items() for port, state, _ in ports
            if state == "ACTIVE"]


def _rdma_errors(ctx: Context) -> dict[str, str]:
    return {name: error for name in RDMA_LIBRARIES if (error := ctx.load_library(name)) is not None}


@check("cluster.rdma-libs", Status.FAIL,
       "install rdma-core's userland in the image: apt-get install libibverbs1 librdmacm1 ibverbs-providers",
       isolated=True)  # loads native libraries
def rdma_libraries(ctx: Context) -> Outcome:
    """libibverbs and librdmacm load (NCCL's InfiniBand/RoCE transport opens them at run time)."""
    errors = _rdma_errors(ctx)
    if not errors:
        return ok(f"{', '.join(RDMA_LIBRARIES)} load")
    missing = ", ".join(errors)
    if ib_devices(ctx) or uverbs(ctx):
        return trip(f"{missing} cannot be loaded but this node has RDMA devices: NCCL falls back to TCP sockets",
                    errors=errors)
    return warn(f"{missing} cannot be loaded: fine on one node, but NCCL would use TCP sockets between nodes",
                "install libibverbs1 librdmacm1 ibverbs-providers before running across nodes", errors=errors)


@check("cluster.nccl-transport", Status.WARN,
       "give the container the RDMA devices (docker run --device /dev/infiniband, or the cluster's RDMA "
       "device plugin) and leave NCCL_IB_DISABLE unset", isolated=True)
def nccl_transport(ctx: Context) -> Outcome:
    """Which inter-node transport NCCL would pick here: IB/RoCE on active ports, else TCP sockets."""
    ports = active_ports(ctx)
    devices = ib_devices(ctx)
    details = {"ib_devices": devices, "uverbs": uverbs(ctx), "NCCL_IB_DISABLE": ctx.environ.get("NCCL_IB_DISABLE")}
    if not devices:
        return skip("no RDMA devices in /sys/class/infiniband: NCCL would use TCP sockets between nodes", **details)
    if ctx.environ.get("NCCL_IB_DISABLE") == "1":
        return trip(f"RDMA ports {', '.join(ports) or 'none active'} present but NCCL_IB_DISABLE=1: NCCL uses "
                    "TCP sockets", "unset NCCL_IB_DISABLE", **details)
    if not ports:
        return trip(f"RDMA devices {', '.join(devices)} have no ACTIVE port: NCCL uses TCP sockets",
                    "check the links (ibstat) and the subnet manager", **details)
    if not uverbs(ctx):
        return trip(f"active RDMA ports {', '.join(ports)} but no /dev/infiniband/uverbs*: the container was not "
                    "given the devices, NCCL uses TCP sockets", **details)
    if _rdma_errors(ctx):
        return trip("active RDMA ports but libibverbs does not load: NCCL uses TCP sockets",
                    "apt-get install libibverbs1 librdmacm1 ibverbs-providers", **details)
    return ok(f"NCCL would use IB/RoCE on {', '.join(ports)}", **details)


def _matches(spec: str, names: list[str]) -> list[str]:
    """NCCL's interface/HCA list syntax: comma-separated prefixes, '=' for exact names, '^' to exclude;
    an HCA entry may carry ':port'."""
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    wanted = [w.split(":")[0] for w in spec.lstrip("^=").split(",") if w]
    hit = [n for n in names if any((n == w) if exact else fnmatch.fnmatch(n, f"{w}*") for w in wanted)]
    return [n for n in names if n not in hit] if exclude else hit


@check("cluster.nccl-names", Status.FAIL,
       "set NCCL_SOCKET_IFNAME / NCCL_IB_HCA to interfaces and devices this node has (ls /sys/class/net "
       "/sys/class/infiniband), or unset them")
def nccl_names(ctx: Context) -> Outcome:
    """NCCL_SOCKET_IFNAME and NCCL_IB_HCA name interfaces and devices that exist here."""
    problems, picked = [], {}
    for var, names, kind in (("NCCL_SOCKET_IFNAME", net_interfaces(ctx), "network interface"),
                             ("NCCL_IB_HCA", list(ib_devices(ctx)), "RDMA device")):
        spec = ctx.environ.get(var)
        if not spec:
            continue
        chosen = _matches(spec, names)
        picked[var] = chosen
        if not chosen:
            problems.append(f"{var}={spec} matches no {kind} here (have: {', '.join(names) or 'none'})")
    if problems:
        return trip("; ".join(problems), **picked)
    if not picked:
        return skip("NCCL_SOCKET_IFNAME and NCCL_IB_HCA unset: NCCL chooses")
    return ok("; ".join(f"{var} selects {', '.join(v)}" for var, v in picked.items()), **picked)


@check("cluster.nccl-net-plugin", Status.FAIL,
       "install the plugin the site documents, or unset NCCL_NET_PLUGIN", isolated=True)
def nccl_net_plugin(ctx: Context) -> Outcome:
    """A named NCCL net plugin (NCCL_NET_PLUGIN: AWS OFI, Azure, GCP's gIB …) loads."""
    name = ctx.environ.get("NCCL_NET_PLUGIN")
    if not name or name == "none":
        error = ctx.load_library("libnccl-net.so")
        return ok("NCCL_NET_PLUGIN unset: " + ("libnccl-net.so found, NCCL will load it" if error is None
                                               else "NCCL uses its own IB and socket transports"))
    library = name if name.endswith(".so") or "/" in name else f"libnccl-net-{name}.so"
    error = ctx.load_library(library)
    if error is not None:
        return trip(f"NCCL_NET_PLUGIN={name}: {library} does not load ({error}); NCCL falls back to its own "
                    "transports", library=library)
    return ok(f"NCCL_NET_PLUGIN={name}: {library} loads", library=library)


def shm_size(ctx: Context) -> int | None:
    """The size limit of the tmpfs on /dev/shm from /proc/self/mounts (None: not a sized tmpfs)."""
    for line in _read(ctx.proc / "self" / "mounts").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            for option in fields[3].split(","):
                if option.startswith("size="):
                    return _bytes(option.removeprefix("size="))
    return None


def _bytes(text: str) -> int:
    units = {"k": 1024, "m": MIB, "g": GIB}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


@check("cluster.shm", Status.FAIL,
       "start the container with --ipc=host (mcore-images run does), or --shm-size=16g",
       isolated=True)  # counts the GPUs through the driver
def shm(ctx: Context) -> Outcome:
    """/dev/shm holds what this node's ranks need (NCCL's shared-memory transport, DataLoader workers)."""
    size = shm_size(ctx)
    ranks = max(1, len(probes.gpu_info(ctx).gpus))
    need = max(GIB, SHM_PER_RANK * ranks)
    if size is None:
        return ok("/dev/shm has no size limit of its own (the host's, or --ipc=host)")
    details = {"shm_bytes": size, "ranks": ranks, "need_bytes": need}
    if size < need:
        why = " — Docker's default: the container was started without --ipc=host" if size == DOCKER_DEFAULT_SHM else ""
        return trip(f"/dev/shm is {size / MIB:.0f} MiB{why}; {ranks} rank(s) here need {need / GIB:.1f} GiB",
                    **details)
    return ok(f"/dev/shm is {size / GIB:.1f} GiB (≥ {need / GIB:.1f} GiB for {ranks} rank(s))", **details)


def memlock_limit(ctx: Context) -> str | None:
    """The soft 'Max locked memory' of this process from /proc/self/limits ('unlimited' or bytes)."""
    for line in _read(ctx.proc / "self" / "limits").splitlines():
        if line.startswith("Max locked memory"):
            return line[len("Max locked memory"):].split()[0]
    return None


@check("cluster.memlock", Status.FAIL,
       "raise the memlock limit: docker run --ulimit memlock=-1 (mcore-images run does); under Slurm, "
       "PropagateResourceLimitsExcept=MEMLOCK and an unlimited limit for slurmd")
def memlock(ctx: Context) -> Outcome:
    """The memlock limit is unlimited: RDMA registers (pins) NCCL's buffers."""
    limit = memlock_limit(ctx)
    if limit is None:
        return skip("no 'Max locked memory' in /proc/self/limits")
    if limit == "unlimited":
        return ok("memlock unlimited")
    text = f"memlock limited to {int(limit) / MIB:.0f} MiB"
    if ib_devices(ctx) or uverbs(ctx):
        return trip(f"{text} on a node with RDMA devices: NCCL's IB transport fails to register its buffers",
                    limit=limit)
    return warn(f"{text}: fine without RDMA, but NCCL's IB transport needs it unlimited",
                "docker run --ulimit memlock=-1 before running across nodes", limit=limit)
