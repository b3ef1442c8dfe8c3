"""Run statistics of every BPF program on the node, read through swarmscope.core.sys.bpf (libbpf).

    from swarmscope.probes import bpfstats
    from swarmscope.core.sys import bpf
    with bpf.stats_enabled():                  # BPF_ENABLE_STATS only while measuring
        before = bpfstats.list_programs()
        time.sleep(1)
        after = bpfstats.list_programs(owners=True)
    for r in bpfstats.rates(before, after, elapsed_ns=1_000_000_000):
        print(r.prog.id, r.prog.name, r.d_run_cnt, r.avg_ns, r.cpu_pct)

Programs are walked with libbpf's bpf_prog_get_next_id / bpf_prog_get_fd_by_id /
bpf_obj_get_info_by_fd (no bpftool at run time). The name is the full function name from the
program's BTF func info when the kernel's 15-character ``name`` is a truncation of it; map
memory is the ``memlock:`` line of each map's fdinfo; owners come from walking
``/proc/*/fdinfo`` for ``prog_id:`` (prog and link fds). ``BpfStats`` is the registry Program
``bpf_stats``: one host-level (cgroup 0) snapshot with counters
``prog.<id>.<name>.{run_cnt,run_time_ns,recursion_misses}``.

Caveats: needs root (CAP_SYS_ADMIN for GET_FD_BY_ID, docs/platform.md#bpf-statistics).
run_cnt/run_time_ns only grow while statistics are on (this module's fd, or
``kernel.bpf_stats_enabled``); run_time_ns includes the kernel's own timing overhead (tens of
ns per run). CPU % is of one CPU (100 = one core busy). A program unloaded between two
snapshots keeps its last value in ``BpfStats`` (its window delta is then what it ran before
it went), so programs coming and going never make a window fail.
Programs pinned only in bpffs with no process holding them have no owners.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
from dataclasses import dataclass, field

from swarmscope.core.errors import ProbeError
from swarmscope.core.sys import bpf
from swarmscope.core.sys.bpf import BtfInfo, ProgInfo
from swarmscope.probes.programs.base import Snapshot

# enum bpf_prog_type, in order (include/uapi/linux/bpf.h).
PROG_TYPES = (
    "unspec socket_filter kprobe sched_cls sched_act tracepoint xdp perf_event cgroup_skb "
    "cgroup_sock lwt_in lwt_out lwt_xmit sock_ops sk_skb cgroup_device sk_msg raw_tracepoint "
    "cgroup_sock_addr lwt_seg6local lirc_mode2 sk_reuseport flow_dissector cgroup_sysctl "
    "raw_tracepoint_writable cgroup_sockopt tracing struct_ops ext lsm sk_lookup syscall netfilter"
).split()


@dataclass
class ProgStats:
    id: int
    type: str
    name: str  # full name (BTF) where the kernel truncated it
    tag: str
    run_cnt: int
    run_time_ns: int
    recursion_misses: int
    map_ids: list[int] = field(default_factory=list)
    map_memlock: int = 0  # bytes, summed over the program's maps
    owners: list[tuple[int, str]] = field(default_factory=list)  # (pid, comm)
    pods: list[str] = field(default_factory=list)  # the owners' pods, "namespace/pod/container"


@dataclass
class ProgRate:
    prog: ProgStats
    d_run_cnt: int
    d_run_time_ns: int
    avg_ns: float  # per run in the interval (0 when it did not run)
    cpu_pct: float  # of one CPU


def prog_map_ids(fd: int, info: ProgInfo | None = None) -> list[int]:
    """Ids of the maps program ``fd`` uses."""
    n = (info or bpf.prog_info(fd)).nr_map_ids
    if not n:
        return []
    arr = (ctypes.c_uint32 * n)()
    q = ProgInfo(nr_map_ids=n, map_ids=ctypes.addressof(arr))
    bpf.obj_info(fd, q)
    return list(arr[: min(n, q.nr_map_ids)])


@dataclass
class MapFill:
    id: int
    name: str
    type: int
    entries: int
    max_entries: int


# Map types whose every slot always exists (array, percpu array, prog array, perf event
# array, cgroup array, array of maps): their "entries" is max_entries.
_ARRAY_TYPES = {2, 3, 4, 6, 8, 12}
MAX_WALK = 1_000_000


def map_fill(map_id: int) -> MapFill | None:
    """A map's name, entries (walked key by key, capped at MAX_WALK) and max_entries.

    Opening a map by id (BPF_MAP_GET_FD_BY_ID) needs CAP_SYS_ADMIN; a process holding the
    map's fd itself (a probe and its own maps) uses ``map_fill_fd``, which needs no more than
    CAP_BPF."""
    fd = bpf.map_fd_by_id(map_id)
    if fd is None:
        return None
    try:
        return map_fill_fd(fd)
    finally:
        os.close(fd)


def map_fill_fd(fd: int) -> MapFill:
    """``map_fill`` of a map whose fd the caller holds (not closed here)."""
    info = bpf.map_info(fd)
    name = info.name.decode(errors="replace")
    if info.type in _ARRAY_TYPES or info.key_size == 0:
        return MapFill(info.id, name, info.type, info.max_entries, info.max_entries)
    key = ctypes.create_string_buffer(info.key_size)
    nxt = ctypes.create_string_buffer(info.key_size)
    n = 0
    while n < MAX_WALK and bpf.map_next_key(fd, key if n else None, nxt):
        ctypes.memmove(key, nxt, info.key_size)
        n += 1
    return MapFill(info.id, name, info.type, n, info.max_entries)


def _btf_names(btf_id: int) -> dict[int, str]:
    """{type id: name} of every named type in BTF object ``btf_id`` (a program's own BTF)."""
    fd = bpf.btf_fd_by_id(btf_id)
    if fd is None:
        return {}
    try:
        info = BtfInfo()
        bpf.obj_info(fd, info)
        raw = ctypes.create_string_buffer(info.btf_size)
        info2 = BtfInfo(btf=ctypes.addressof(raw), btf_size=info.btf_size)
        bpf.obj_info(fd, info2)
    finally:
        os.close(fd)
    return parse_btf_names(raw.raw)


# Extra bytes after the 12-byte btf_type: fixed, or per vlen entry, by BTF kind.
_BTF_FIXED = {1: 4, 3: 12, 14: 4, 17: 4}
_BTF_PER_VLEN = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}


def parse_btf_names(data: bytes) -> dict[int, str]:
    magic, _ver, _flags, hdr_len, type_off, type_len, str_off, _str_len = struct.unpack_from(
        "<HBBIIIII", data, 0
    )
    if magic != 0xEB9F:
        return {}
    types = hdr_len + type_off
    strings = hdr_len + str_off
    out: dict[int, str] = {}
    pos, tid = types, 1
    while pos + 12 <= types + type_len:
        name_off, info, _size = struct.unpack_from("<III", data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if name_off:
            end = data.index(b"\0", strings + name_off)
            out[tid] = data[strings + name_off : end].decode(errors="replace")
        pos += 12 + _BTF_FIXED.get(kind, 0) + _BTF_PER_VLEN.get(kind, 0) * vlen
        tid += 1
    return out


# Program ids are never reused while the kernel runs, so a name read from BTF once stays right;
# bounded so a node that loads programs all day does not grow it forever.
_NAMES: dict[int, str] = {}
MAX_NAMES = 65536


def full_name(fd: int, info: ProgInfo) -> str:
    """The program's function name from BTF func info, else the kernel's (maybe truncated) name."""
    short = info.name.decode(errors="replace")
    if not info.btf_id or not info.nr_func_info or len(short) < 15:
        return short
    if info.id not in _NAMES:
        if len(_NAMES) >= MAX_NAMES:
            _NAMES.clear()
        _NAMES[info.id] = _btf_full_name(fd, info, short)
    return _NAMES[info.id]


def _btf_full_name(fd: int, info: ProgInfo, short: str) -> str:
    rec = max(info.func_info_rec_size, 8)
    buf = ctypes.create_string_buffer(rec)
    q = ProgInfo(nr_func_info=1, func_info_rec_size=rec, func_info=ctypes.addressof(buf))
    try:
        bpf.obj_info(fd, q)
        _insn_off, type_id = struct.unpack_from("<II", buf, 0)
        name = _btf_names(info.btf_id).get(type_id, "")
    except (ProbeError, ValueError, struct.error):
        return short
    # Not a prefix test: BCC names a tracepoint program 'sched__sched_pr...' in the kernel
    # but 'tracepoint__sched__sched_process_exec' in BTF (bpftool shows the BTF one too).
    return name or short


def _map_memlock(map_id: int, cache: dict[int, int]) -> int:
    if map_id not in cache:
        fd = bpf.map_fd_by_id(map_id)
        mem = 0
        if fd is not None:
            try:
                with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as fh:
                    for line in fh:
                        if line.startswith("memlock:"):
                            mem = int(line.split()[1])
            finally:
                os.close(fd)
        cache[map_id] = mem
    return cache[map_id]


_PROG_ID = re.compile(r"^prog_id:\s+(\d+)", re.M)


def owners() -> dict[int, list[tuple[int, str]]]:
    """{prog id: [(pid, comm), ...]} for every process holding a prog or link fd."""
    out: dict[int, set[tuple[int, str]]] = {}
    for pid_s in os.listdir("/proc"):
        if not pid_s.isdigit():
            continue
        fd_dir = f"/proc/{pid_s}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if target not in ("anon_inode:bpf-prog", "anon_inode:bpf_link"):
                    continue
                with open(f"/proc/{pid_s}/fdinfo/{fd}", encoding="ascii") as fh:
                    m = _PROG_ID.search(fh.read())
                with open(f"/proc/{pid_s}/comm", encoding="utf-8", errors="replace") as fh:
                    comm = fh.read().strip()
            except OSError:  # process or fd went away while we looked
                continue
            if m:
                out.setdefault(int(m.group(1)), set()).add((int(pid_s), comm))
    return {k: sorted(v) for k, v in out.items()}


def list_programs(*, owners_too: bool = False, maps: bool = True) -> dict[int, ProgStats]:
    """Every loaded program's cumulative statistics, by id."""
    found: dict[int, ProgStats] = {}
    memlock: dict[int, int] = {}
    who = owners() if owners_too else {}
    cur: int | None = 0
    while cur is not None and (nxt := bpf.prog_next_id(cur)) is not None:
        pid = cur = nxt
        fd = bpf.prog_fd_by_id(pid)
        if fd is None:
            continue
        try:
            info = bpf.prog_info(fd)
            map_ids = prog_map_ids(fd, info) if maps else []
            name = full_name(fd, info)
        finally:
            os.close(fd)
        found[pid] = ProgStats(
            id=info.id,
            type=PROG_TYPES[info.type] if info.type < len(PROG_TYPES) else str(info.type),
            name=name,
            tag=bytes(info.tag).hex(),
            run_cnt=info.run_cnt,
            run_time_ns=info.run_time_ns,
            recursion_misses=info.recursion_misses,
            map_ids=map_ids,
            map_memlock=sum(_map_memlock(m, memlock) for m in map_ids),
            owners=who.get(pid, []),
        )
    return found


def rates(before: dict[int, ProgStats], after: dict[int, ProgStats], elapsed_ns: int) -> list[ProgRate]:
    """Per-program deltas over an interval; programs new in ``after`` count from zero."""
    out: list[ProgRate] = []
    for pid, a in after.items():
        b = before.get(pid)
        d_cnt = a.run_cnt - (b.run_cnt if b else 0)
        d_ns = a.run_time_ns - (b.run_time_ns if b else 0)
        out.append(
            ProgRate(
                prog=a,
                d_run_cnt=d_cnt,
                d_run_time_ns=d_ns,
                avg_ns=d_ns / d_cnt if d_cnt > 0 else 0.0,
                cpu_pct=100.0 * d_ns / elapsed_ns if elapsed_ns > 0 else 0.0,
            )
        )
    return out


def safe_name(name: str) -> str:
    """A program name usable inside a dotted counter name."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"


# Programs that disappeared are remembered at most this many at once (a churning node would
# otherwise grow the snapshot without bound); the oldest are dropped first.
MAX_GONE = 4096


class BpfStats:
    """Registry Program ``bpf_stats``: every program's run counters as one host-level entry."""

    name: str = "bpf_stats"
    counters: tuple[str, ...] = ()  # dynamic: prog.<id>.<name>.<field>

    def __init__(self) -> None:
        self._fd: int | None = None
        self._last: dict[str, int] = {}
        self._gone: list[int] = []

    def load(self) -> None:
        if self._fd is None:
            self._fd = bpf.enable_stats()

    def snapshot(self) -> Snapshot:
        if self._fd is None:
            raise ProbeError("bpf_stats: snapshot before load()")
        now = list_programs(maps=False)
        seen: set[int] = set()
        for p in now.values():
            base = f"prog.{p.id}.{safe_name(p.name)}"
            self._last[f"{base}.run_cnt"] = p.run_cnt
            self._last[f"{base}.run_time_ns"] = p.run_time_ns
            self._last[f"{base}.recursion_misses"] = p.recursion_misses
            seen.add(p.id)
        known = {int(k.split(".", 2)[1]) for k in self._last}
        for gone in sorted(known - seen - set(self._gone)):
            self._gone.append(gone)
        while len(self._gone) > MAX_GONE:
            old = self._gone.pop(0)
            prefix = f"prog.{old}."
            for k in [k for k in self._last if k.startswith(prefix)]:
                del self._last[k]
        return {0: dict(self._last)}

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
