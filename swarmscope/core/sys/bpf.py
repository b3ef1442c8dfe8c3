"""The one module that makes raw ``bpf()`` calls: libbpf's low-level wrappers, through ctypes.

    from swarmscope.core.sys import bpf
    with bpf.stats_enabled():                      # BPF_ENABLE_STATS while the block runs
        pid = bpf.prog_next_id(0)                  # None when no program is loaded
        fd = bpf.prog_fd_by_id(pid)                # None when it was unloaded meanwhile
        info = bpf.prog_info(fd)                   # struct bpf_prog_info: run_cnt, run_time_ns ...
    bpf.map_update_batch(map_fd, keys, values, key_size=4, value_size=12)
    link = bpf.tracepoint_link(prog_fd, "sched", "sched_process_exec"); bpf.obj_pin(link, path)

Everything resolves from Debian's ``libbpf1`` (``libbpf.so.1``, installed by tools/setup.sh), so
no ``bpf()`` syscall number or ``union bpf_attr`` layout is hard-coded here: libbpf knows both
for the architecture it was built for. The exception is ``perf_event_open`` (no libbpf
wrapper), whose number and attr prefix ``tracepoint_link`` writes out. BCC loads the programs;
this module walks, reads and writes objects that already exist, and pins them and links
tracepoint programs for the probe (docs/platform.md#pinning-the-probe).

Errors: a failed call raises :class:`swarmscope.core.errors.BpfError` (a ProbeError) carrying the
kernel's errno, chained from the OSError. "Object gone" (ENOENT) is not an error where it is
an expected answer: ``*_fd_by_id`` and ``*_next_id`` return None, ``map_lookup_elem`` returns
None, the batch readers stop.

Caveats: needs root (CAP_SYS_ADMIN for the GET_FD_BY_ID and ENABLE_STATS commands, see
docs/platform.md#bpf-statistics). Byte strings are handed to the kernel by address without a
copy; that is safe only because every such call here is one the kernel reads from.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
from collections.abc import Iterator

from swarmscope.core.errors import BpfError, SetupError

LIBBPF = "libbpf.so.1"
BPF_STATS_RUN_TIME = 0  # enum bpf_stats_type

_c = ctypes
_u32p = ctypes.POINTER(ctypes.c_uint32)
_vp = ctypes.c_void_p

# name -> argument types; every one of these returns int (fd, 0, or a negative error).
_SIGNATURES: dict[str, list[type]] = {
    "bpf_prog_get_next_id": [_c.c_uint32, _u32p],
    "bpf_map_get_next_id": [_c.c_uint32, _u32p],
    "bpf_prog_get_fd_by_id": [_c.c_uint32],
    "bpf_map_get_fd_by_id": [_c.c_uint32],
    "bpf_btf_get_fd_by_id": [_c.c_uint32],
    "bpf_obj_get_info_by_fd": [_c.c_int, _vp, _u32p],
    "bpf_obj_get": [_c.c_char_p],
    "bpf_enable_stats": [_c.c_int],
    "bpf_map_get_next_key": [_c.c_int, _vp, _vp],
    "bpf_map_lookup_elem": [_c.c_int, _vp, _vp],
    "bpf_map_update_elem": [_c.c_int, _vp, _vp, _c.c_uint64],
    "bpf_map_create": [_c.c_int, _c.c_char_p, _c.c_uint32, _c.c_uint32, _c.c_uint32, _vp],
    "bpf_map_delete_elem": [_c.c_int, _vp],
    "bpf_map_lookup_batch": [_c.c_int, _vp, _vp, _vp, _vp, _u32p, _vp],
    "bpf_map_lookup_and_delete_batch": [_c.c_int, _vp, _vp, _vp, _vp, _u32p, _vp],
    "bpf_map_update_batch": [_c.c_int, _vp, _vp, _u32p, _vp],
    "bpf_map_delete_batch": [_c.c_int, _vp, _u32p, _vp],
    "bpf_obj_pin": [_c.c_int, _c.c_char_p],
    "bpf_link_create": [_c.c_int, _c.c_int, _c.c_int, _vp],
    "libbpf_num_possible_cpus": [],
}


@functools.cache
def _lib() -> ctypes.CDLL:
    # Loaded on first use, not at import: modules that only parse (tests, `--help`) must
    # import on a machine without libbpf1.
    try:
        lib = ctypes.CDLL(LIBBPF, use_errno=True)
    except OSError as e:
        raise SetupError(f"cannot load {LIBBPF} (Debian package libbpf1; run tools/setup.sh): {e}") from e
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    return lib


def _call(name: str, *args: object) -> int:
    """Call libbpf's ``name``; return its non-negative result or raise OSError with the errno."""
    ctypes.set_errno(0)
    r: int = getattr(_lib(), name)(*args)
    if r < 0:
        # libbpf 1.x returns -errno and sets errno too; prefer errno, fall back to -r.
        err = ctypes.get_errno() or -r
        raise OSError(err, os.strerror(err))
    return r


def _wrap(what: str, e: OSError) -> BpfError:
    hint = " (root needed)" if e.errno == errno.EPERM else ""
    return BpfError(f"{what}: {e.strerror}{hint}", e.errno or 0)


# -- ABI structs the kernel fills (include/uapi/linux/bpf.h) ----------------------------------
# The kernel copies at most sizeof(what we pass), so a prefix of a newer struct is fine.


class ProgInfo(ctypes.Structure):
    """struct bpf_prog_info, up to attach_btf_id."""

    _fields_ = [  # noqa: RUF012 (ctypes reads it at class creation)
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("nr_jited_ksyms", ctypes.c_uint32),
        ("nr_jited_func_lens", ctypes.c_uint32),
        ("jited_ksyms", ctypes.c_uint64),
        ("jited_func_lens", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("nr_func_info", ctypes.c_uint32),
        ("nr_line_info", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("jited_line_info", ctypes.c_uint64),
        ("nr_jited_line_info", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("jited_line_info_rec_size", ctypes.c_uint32),
        ("nr_prog_tags", ctypes.c_uint32),
        ("prog_tags", ctypes.c_uint64),
        ("run_time_ns", ctypes.c_uint64),
        ("run_cnt", ctypes.c_uint64),
        ("recursion_misses", ctypes.c_uint64),
        ("verified_insns", ctypes.c_uint32),
        ("attach_btf_obj_id", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class MapInfo(ctypes.Structure):
    """struct bpf_map_info, up to map_extra."""

    _fields_ = [  # noqa: RUF012 (ctypes reads it at class creation)
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
        ("ifindex", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
    ]


class BtfInfo(ctypes.Structure):
    """struct bpf_btf_info."""

    _fields_ = [  # noqa: RUF012 (ctypes reads it at class creation)
        ("btf", ctypes.c_uint64),
        ("btf_size", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("name", ctypes.c_uint64),
        ("name_len", ctypes.c_uint32),
        ("kernel_btf", ctypes.c_uint32),
    ]


# -- walking objects by id --------------------------------------------------------------------


def _next_id(fn: str, start: int) -> int | None:
    nxt = ctypes.c_uint32(0)
    try:
        _call(fn, start, ctypes.byref(nxt))
    except OSError as e:
        if e.errno == errno.ENOENT:  # past the last id
            return None
        raise _wrap(fn, e) from e
    return int(nxt.value)


def prog_next_id(start: int) -> int | None:
    """The next loaded program's id after ``start`` (0 for the first), None at the end."""
    return _next_id("bpf_prog_get_next_id", start)


def map_next_id(start: int) -> int | None:
    """The next map id after ``start`` (0 for the first), None at the end."""
    return _next_id("bpf_map_get_next_id", start)


def _fd_by_id(fn: str, obj_id: int) -> int | None:
    try:
        return _call(fn, obj_id)
    except OSError as e:
        if e.errno == errno.ENOENT:  # unloaded since it was listed
            return None
        raise _wrap(f"{fn}({obj_id})", e) from e


def prog_fd_by_id(prog_id: int) -> int | None:
    """A new fd for program ``prog_id`` (close it), or None when it is gone."""
    return _fd_by_id("bpf_prog_get_fd_by_id", prog_id)


def map_fd_by_id(map_id: int) -> int | None:
    """A new fd for map ``map_id`` (close it), or None when it is gone."""
    return _fd_by_id("bpf_map_get_fd_by_id", map_id)


def btf_fd_by_id(btf_id: int) -> int | None:
    """A new fd for BTF object ``btf_id`` (close it), or None when it is gone."""
    return _fd_by_id("bpf_btf_get_fd_by_id", btf_id)


def obj_info(fd: int, info: ctypes.Structure) -> None:
    """Fill ``info`` (ProgInfo, MapInfo, BtfInfo) for the object behind ``fd``.

    Pointer fields set in ``info`` beforehand (map_ids, func_info, btf) are filled too: that is
    how the kernel returns arrays.
    """
    size = ctypes.c_uint32(ctypes.sizeof(info))
    try:
        _call("bpf_obj_get_info_by_fd", fd, ctypes.addressof(info), ctypes.byref(size))
    except OSError as e:
        raise _wrap(f"bpf_obj_get_info_by_fd(fd {fd})", e) from e


def prog_info(fd: int) -> ProgInfo:
    info = ProgInfo()
    obj_info(fd, info)
    return info


def map_info(fd: int) -> MapInfo:
    info = MapInfo()
    obj_info(fd, info)
    return info


def obj_get(path: str) -> int:
    """fd of an object pinned in bpffs (close it)."""
    try:
        return _call("bpf_obj_get", os.fsencode(path))
    except OSError as e:
        raise _wrap(f"bpf_obj_get {path}", e) from e


def obj_pin(fd: int, path: str) -> None:
    """Pin the object behind ``fd`` (program, map, link) at ``path`` in bpffs: it outlives us."""
    try:
        _call("bpf_obj_pin", fd, os.fsencode(path))
    except OSError as e:
        raise _wrap(f"bpf_obj_pin {path}", e) from e


def possible_cpus() -> int:
    """How many per-CPU slots a per-CPU map value has (the kernel's possible CPUs)."""
    try:
        return _call("libbpf_num_possible_cpus")
    except OSError as e:
        raise _wrap("libbpf_num_possible_cpus", e) from e


BPF_PERF_EVENT = 41  # enum bpf_attach_type
_PERF_TYPE_TRACEPOINT = 2
_PERF_FLAG_FD_CLOEXEC = 8
# perf_event_open has no libbpf wrapper; its number is the one thing written here per arch.
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


def tracepoint_link(prog_fd: int, category: str, event: str, tracefs: str = "/sys/kernel/tracing") -> int:
    """fd of a BPF link attaching tracepoint program ``prog_fd`` to ``category:event``.

    A link (BPF_LINK_CREATE on a tracepoint perf event), unlike BCC's perf-event attachment,
    can be pinned: pinned, it keeps the program attached after every process has gone. The
    link holds the perf event; this function closes its own fd of it.
    """
    try:
        with open(f"{tracefs}/events/{category}/{event}/id", encoding="ascii") as fh:
            tp_id = int(fh.read())
    except OSError as e:
        raise BpfError(f"tracepoint {category}:{event}: {e.strerror}", e.errno or 0) from e
    attr = ctypes.create_string_buffer(112)  # struct perf_event_attr, PERF_ATTR_SIZE_VER5
    ctypes.memmove(attr, (ctypes.c_uint32 * 2)(_PERF_TYPE_TRACEPOINT, 112), 8)  # type, size
    ctypes.memmove(ctypes.addressof(attr) + 8, (ctypes.c_uint64 * 2)(tp_id, 1), 16)  # config, period
    ctypes.memmove(ctypes.addressof(attr) + 48, (ctypes.c_uint32 * 1)(1), 4)  # wakeup_events
    libc = ctypes.CDLL(None, use_errno=True)
    nr = _NR_PERF_EVENT_OPEN.get(os.uname().machine)
    if nr is None:
        raise BpfError(f"perf_event_open: unknown syscall number on {os.uname().machine}", errno.ENOSYS)
    # cpu 0, any pid: a tracepoint's BPF programs run on every CPU whatever the event's CPU.
    pfd = int(libc.syscall(nr, attr, -1, 0, -1, _PERF_FLAG_FD_CLOEXEC))
    if pfd < 0:
        err = ctypes.get_errno()
        raise BpfError(f"perf_event_open {category}:{event}: {os.strerror(err)}", err)
    try:
        return _call("bpf_link_create", prog_fd, pfd, BPF_PERF_EVENT, None)
    except OSError as e:
        raise _wrap(f"bpf_link_create {category}:{event}", e) from e
    finally:
        os.close(pfd)


BPF_XDP = 37  # enum bpf_attach_type


class _LinkCreateOpts(ctypes.Structure):
    """libbpf's struct bpf_link_create_opts, up to ``flags`` (libbpf zeroes what follows)."""

    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32)]  # noqa: RUF012


def xdp_link(prog_fd: int, ifindex: int, flags: int) -> int:
    """fd of a BPF link attaching XDP program ``prog_fd`` to interface ``ifindex`` (of the
    calling thread's network namespace) with XDP ``flags`` (mode). Pinned, it keeps the program
    attached after every process has gone; the last reference gone, it detaches."""
    opts = _LinkCreateOpts(ctypes.sizeof(_LinkCreateOpts), flags)
    try:
        return _call("bpf_link_create", prog_fd, ifindex, BPF_XDP, ctypes.byref(opts))
    except OSError as e:
        raise _wrap(f"bpf_link_create xdp ifindex {ifindex}", e) from e


def fd_map_id(pid: int, fd: int) -> int | None:
    """Id of the map behind ``fd`` of process ``pid`` (its /proc fdinfo), None if not a map."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("map_id:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# -- run statistics ---------------------------------------------------------------------------


def enable_stats() -> int:
    """Turn on BPF run statistics; they stay on while the returned fd is open (close it)."""
    try:
        return _call("bpf_enable_stats", BPF_STATS_RUN_TIME)
    except OSError as e:
        raise _wrap("bpf_enable_stats(BPF_STATS_RUN_TIME)", e) from e


@contextlib.contextmanager
def stats_enabled() -> Iterator[None]:
    """Run statistics on for the duration of the block, then off again (unless others hold them)."""
    fd = enable_stats()
    try:
        yield
    finally:
        os.close(fd)


# -- map contents -----------------------------------------------------------------------------


def _addr(b: bytes) -> int:
    # The address of an immutable bytes object's buffer: no copy of a 12 MB batch.
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


def map_next_key(fd: int, key: ctypes.Array[ctypes.c_char] | None, out: ctypes.Array[ctypes.c_char]) -> bool:
    """Write the key after ``key`` (None: the first key) into ``out``; False past the last."""
    try:
        prev = None if key is None else ctypes.addressof(key)
        _call("bpf_map_get_next_key", fd, prev, ctypes.addressof(out))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return False
        raise _wrap(f"bpf_map_get_next_key(fd {fd})", e) from e
    return True


def map_lookup_elem(fd: int, key: bytes, value_size: int) -> bytes | None:
    """One element's value, None when the key is absent."""
    out = ctypes.create_string_buffer(value_size)
    try:
        _call("bpf_map_lookup_elem", fd, _addr(key), ctypes.addressof(out))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise _wrap(f"bpf_map_lookup_elem(fd {fd})", e) from e
    return out.raw


def map_update_elem(fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
    """One BPF_MAP_UPDATE_ELEM (flags: 0 = BPF_ANY)."""
    try:
        _call("bpf_map_update_elem", fd, _addr(key), _addr(value), flags)
    except OSError as e:
        raise _wrap(f"bpf_map_update_elem(fd {fd})", e) from e


def map_delete_elem(fd: int, key: bytes) -> bool:
    """Delete one element; False when the key was absent."""
    try:
        _call("bpf_map_delete_elem", fd, _addr(key))
    except OSError as e:
        if e.errno == errno.ENOENT:
            return False
        raise _wrap(f"bpf_map_delete_elem(fd {fd})", e) from e
    return True


BPF_MAP_TYPE_HASH = 1


def map_create(map_type: int, name: str, key_size: int, value_size: int, max_entries: int) -> int:
    """fd of a new map (close it; the map goes when the last fd and pin do)."""
    try:
        return _call("bpf_map_create", map_type, name.encode(), key_size, value_size, max_entries, None)
    except OSError as e:
        raise _wrap(f"bpf_map_create {name!r}", e) from e


def map_update_batch(fd: int, keys: bytes, values: bytes, key_size: int = 4, value_size: int = 12) -> int:
    """Write every packed (key, value) in one BPF_MAP_UPDATE_BATCH; returns the count written."""
    n = len(keys) // key_size
    if n and len(values) != n * value_size:
        raise BpfError(f"map_update_batch: {n} keys but {len(values)} value bytes", errno.EINVAL)
    return map_update_batch_at(fd, _addr(keys), _addr(values), n)


def map_update_batch_at(fd: int, keys: int, values: int, n: int) -> int:
    """:func:`map_update_batch` from raw addresses (a mapping the caller keeps alive): the
    neighbor agent programs straight from the control plane's shared log, with no copy."""
    if n == 0:
        return 0
    count = ctypes.c_uint32(n)
    try:
        _call("bpf_map_update_batch", fd, keys, values, ctypes.byref(count), None)
    except OSError as e:
        raise _wrap(f"bpf_map_update_batch of {n} entries failed after {count.value}", e) from e
    return int(count.value)


def map_delete_batch(fd: int, keys: bytes, key_size: int = 4) -> int:
    """Delete packed keys; absent keys are skipped (the kernel stops a batch at the first one)."""
    n = len(keys) // key_size
    done = 0
    while done < n:
        count = ctypes.c_uint32(n - done)
        try:
            _call("bpf_map_delete_batch", fd, _addr(keys[done * key_size :]), ctypes.byref(count), None)
            done += int(count.value)
        except OSError as e:
            done += int(count.value)  # deleted before the failing key
            if e.errno != errno.ENOENT:
                raise _wrap(f"bpf_map_delete_batch(fd {fd})", e) from e
            done += 1  # this key was absent: skip it
    return n


def map_lookup_batches(
    fd: int, key_size: int = 4, value_size: int = 12, chunk: int = 65536, delete: bool = False
) -> Iterator[tuple[bytes, bytes]]:
    """The whole map as packed (keys, values) pages of up to ``chunk`` entries each; with
    ``delete``, each page is removed from the map as it is read (BPF_MAP_LOOKUP_AND_DELETE_BATCH).

    Caveat: hash maps need an out_batch token at least as large as their key and per-CPU maps
    return value_size rounded up to 8 times the CPU count; pass that as ``value_size``.
    """
    keys = ctypes.create_string_buffer(chunk * key_size)
    vals = ctypes.create_string_buffer(chunk * value_size)
    tok_in = ctypes.create_string_buffer(max(key_size, 8))
    tok_out = ctypes.create_string_buffer(max(key_size, 8))
    first = True
    while True:
        count = ctypes.c_uint32(chunk)
        done = False
        try:
            _call(
                "bpf_map_lookup_and_delete_batch" if delete else "bpf_map_lookup_batch",
                fd,
                None if first else ctypes.addressof(tok_in),
                ctypes.addressof(tok_out),
                ctypes.addressof(keys),
                ctypes.addressof(vals),
                ctypes.byref(count),
                None,
            )
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise _wrap(f"bpf_map_lookup{'_and_delete' if delete else ''}_batch(fd {fd})", e) from e
            done = True  # ENOENT: this page (maybe empty) is the last
        n = int(count.value)
        if n:
            yield keys.raw[: n * key_size], vals.raw[: n * value_size]
        if done:
            return
        ctypes.memmove(tok_in, tok_out, len(tok_out))
        first = False


def map_read_all(fd: int, key_size: int = 4, value_size: int = 12) -> dict[bytes, bytes]:
    """{key bytes: value bytes} of every entry, read in batches."""
    out: dict[bytes, bytes] = {}
    for k, v in map_lookup_batches(fd, key_size, value_size):
        out.update(
            zip(
                (k[i : i + key_size] for i in range(0, len(k), key_size)),
                (v[i : i + value_size] for i in range(0, len(v), value_size)),
                strict=True,
            )
        )
    return out
