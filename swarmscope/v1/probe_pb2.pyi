from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeInfo(_message.Message):
    __slots__ = ("name", "cgroup_id", "cgroup_path", "host")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CGROUP_ID_FIELD_NUMBER: _ClassVar[int]
    CGROUP_PATH_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    name: str
    cgroup_id: int
    cgroup_path: str
    host: str
    def __init__(self, name: _Optional[str] = ..., cgroup_id: _Optional[int] = ..., cgroup_path: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class HelloRequest(_message.Message):
    __slots__ = ("probe_nonce", "probe_id", "node")
    PROBE_NONCE_FIELD_NUMBER: _ClassVar[int]
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    probe_nonce: bytes
    probe_id: str
    node: str
    def __init__(self, probe_nonce: _Optional[bytes] = ..., probe_id: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("server_nonce", "proof")
    SERVER_NONCE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    server_nonce: bytes
    proof: bytes
    def __init__(self, server_nonce: _Optional[bytes] = ..., proof: _Optional[bytes] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("probe_id", "hostname", "node_name", "kernel_release", "programs", "nonce", "version", "server_nonce", "proof", "relay")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    KERNEL_RELEASE_FIELD_NUMBER: _ClassVar[int]
    PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_NONCE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    probe_id: str
    hostname: str
    node_name: str
    kernel_release: str
    programs: _containers.RepeatedScalarFieldContainer[str]
    nonce: bytes
    version: str
    server_nonce: bytes
    proof: bytes
    relay: bool
    def __init__(self, probe_id: _Optional[str] = ..., hostname: _Optional[str] = ..., node_name: _Optional[str] = ..., kernel_release: _Optional[str] = ..., programs: _Optional[_Iterable[str]] = ..., nonce: _Optional[bytes] = ..., version: _Optional[str] = ..., server_nonce: _Optional[bytes] = ..., proof: _Optional[bytes] = ..., relay: bool = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("session_id", "heartbeat_interval_s")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    heartbeat_interval_s: float
    def __init__(self, session_id: _Optional[str] = ..., heartbeat_interval_s: _Optional[float] = ...) -> None: ...

class OpenWindow(_message.Message):
    __slots__ = ("run_id", "window_id", "traceparent", "programs", "nodes", "options")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    traceparent: str
    programs: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    options: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., traceparent: _Optional[str] = ..., programs: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CloseWindow(_message.Message):
    __slots__ = ("run_id", "window_id", "drain_prefix", "drain_from", "drain_rounds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    DRAIN_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FROM_FIELD_NUMBER: _ClassVar[int]
    DRAIN_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    drain_prefix: str
    drain_from: int
    drain_rounds: int
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., drain_prefix: _Optional[str] = ..., drain_from: _Optional[int] = ..., drain_rounds: _Optional[int] = ...) -> None: ...

class ReadWindow(_message.Message):
    __slots__ = ("run_id", "window_id", "read_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    read_id: int
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., read_id: _Optional[int] = ...) -> None: ...

class Shutdown(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("seq", "open", "close", "shutdown", "read")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    open: OpenWindow
    close: CloseWindow
    shutdown: Shutdown
    read: ReadWindow
    def __init__(self, seq: _Optional[int] = ..., open: _Optional[_Union[OpenWindow, _Mapping]] = ..., close: _Optional[_Union[CloseWindow, _Mapping]] = ..., shutdown: _Optional[_Union[Shutdown, _Mapping]] = ..., read: _Optional[_Union[ReadWindow, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("unix_ns", "cpu_percent", "rss_bytes")
    UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    unix_ns: int
    cpu_percent: float
    rss_bytes: int
    def __init__(self, unix_ns: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ...) -> None: ...

class WindowAck(_message.Message):
    __slots__ = ("run_id", "window_id", "ok", "error", "unix_ns", "probes")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    ok: bool
    error: str
    unix_ns: int
    probes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., ok: bool = ..., error: _Optional[str] = ..., unix_ns: _Optional[int] = ..., probes: _Optional[_Iterable[str]] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("series", "start_ns", "end_ns", "value", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SERIES_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    END_NS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    series: str
    start_ns: int
    end_ns: int
    value: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, series: _Optional[str] = ..., start_ns: _Optional[int] = ..., end_ns: _Optional[int] = ..., value: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Reading(_message.Message):
    __slots__ = ("run_id", "window_id", "probe_id", "node", "counters", "gauges", "start_unix_ns", "end_unix_ns", "error", "samples", "pod", "drained")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class GaugesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    GAUGES_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    probe_id: str
    node: str
    counters: _containers.ScalarMap[str, int]
    gauges: _containers.ScalarMap[str, float]
    start_unix_ns: int
    end_unix_ns: int
    error: str
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    pod: str
    drained: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., probe_id: _Optional[str] = ..., node: _Optional[str] = ..., counters: _Optional[_Mapping[str, int]] = ..., gauges: _Optional[_Mapping[str, float]] = ..., start_unix_ns: _Optional[int] = ..., end_unix_ns: _Optional[int] = ..., error: _Optional[str] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., pod: _Optional[str] = ..., drained: _Optional[_Iterable[int]] = ...) -> None: ...

class WindowDone(_message.Message):
    __slots__ = ("run_id", "window_id", "readings", "batch", "trace", "missing", "probes", "table", "read_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    READINGS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    PROBES_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    READ_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    window_id: str
    readings: int
    batch: _containers.RepeatedCompositeFieldContainer[Reading]
    trace: bytes
    missing: _containers.RepeatedScalarFieldContainer[str]
    probes: _containers.RepeatedScalarFieldContainer[str]
    table: ReadingTable
    read_id: int
    def __init__(self, run_id: _Optional[str] = ..., window_id: _Optional[str] = ..., readings: _Optional[int] = ..., batch: _Optional[_Iterable[_Union[Reading, _Mapping]]] = ..., trace: _Optional[bytes] = ..., missing: _Optional[_Iterable[str]] = ..., probes: _Optional[_Iterable[str]] = ..., table: _Optional[_Union[ReadingTable, _Mapping]] = ..., read_id: _Optional[int] = ...) -> None: ...

class ReadingTable(_message.Message):
    __slots__ = ("probe_id", "node", "start_unix_ns", "end_unix_ns", "error", "pod", "counters")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    probe_id: _containers.RepeatedScalarFieldContainer[str]
    node: _containers.RepeatedScalarFieldContainer[str]
    start_unix_ns: _containers.RepeatedScalarFieldContainer[int]
    end_unix_ns: _containers.RepeatedScalarFieldContainer[int]
    error: _containers.RepeatedScalarFieldContainer[str]
    pod: _containers.RepeatedScalarFieldContainer[str]
    counters: _containers.RepeatedCompositeFieldContainer[CounterColumn]
    def __init__(self, probe_id: _Optional[_Iterable[str]] = ..., node: _Optional[_Iterable[str]] = ..., start_unix_ns: _Optional[_Iterable[int]] = ..., end_unix_ns: _Optional[_Iterable[int]] = ..., error: _Optional[_Iterable[str]] = ..., pod: _Optional[_Iterable[str]] = ..., counters: _Optional[_Iterable[_Union[CounterColumn, _Mapping]]] = ...) -> None: ...

class CounterColumn(_message.Message):
    __slots__ = ("name", "rows", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    rows: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., rows: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class RosterEntry(_message.Message):
    __slots__ = ("probe_id", "host")
    PROBE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    probe_id: str
    host: str
    def __init__(self, probe_id: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class Roster(_message.Message):
    __slots__ = ("added", "removed")
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    added: _containers.RepeatedCompositeFieldContainer[RosterEntry]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, added: _Optional[_Iterable[_Union[RosterEntry, _Mapping]]] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...

class ProbeMessage(_message.Message):
    __slots__ = ("session_id", "heartbeat", "ack", "reading", "done", "roster", "part", "so_far")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ROSTER_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    SO_FAR_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    heartbeat: Heartbeat
    ack: WindowAck
    reading: Reading
    done: WindowDone
    roster: Roster
    part: Part
    so_far: WindowDone
    def __init__(self, session_id: _Optional[str] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., ack: _Optional[_Union[WindowAck, _Mapping]] = ..., reading: _Optional[_Union[Reading, _Mapping]] = ..., done: _Optional[_Union[WindowDone, _Mapping]] = ..., roster: _Optional[_Union[Roster, _Mapping]] = ..., part: _Optional[_Union[Part, _Mapping]] = ..., so_far: _Optional[_Union[WindowDone, _Mapping]] = ...) -> None: ...

class Part(_message.Message):
    __slots__ = ("data", "last")
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    last: bool
    def __init__(self, data: _Optional[bytes] = ..., last: bool = ...) -> None: ...
