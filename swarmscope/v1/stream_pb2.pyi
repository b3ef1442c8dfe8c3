from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecEvent(_message.Message):
    __slots__ = ("ts_ns", "cgroup_id", "pid", "tgid", "comm", "node", "final")
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    CGROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TGID_FIELD_NUMBER: _ClassVar[int]
    COMM_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    ts_ns: int
    cgroup_id: int
    pid: int
    tgid: int
    comm: str
    node: str
    final: AgentFinal
    def __init__(self, ts_ns: _Optional[int] = ..., cgroup_id: _Optional[int] = ..., pid: _Optional[int] = ..., tgid: _Optional[int] = ..., comm: _Optional[str] = ..., node: _Optional[str] = ..., final: _Optional[_Union[AgentFinal, _Mapping]] = ...) -> None: ...

class AgentFinal(_message.Message):
    __slots__ = ("kernel_drops", "drops_by_cgroup", "sent")
    class DropsByCgroupEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    KERNEL_DROPS_FIELD_NUMBER: _ClassVar[int]
    DROPS_BY_CGROUP_FIELD_NUMBER: _ClassVar[int]
    SENT_FIELD_NUMBER: _ClassVar[int]
    kernel_drops: int
    drops_by_cgroup: _containers.ScalarMap[int, int]
    sent: int
    def __init__(self, kernel_drops: _Optional[int] = ..., drops_by_cgroup: _Optional[_Mapping[int, int]] = ..., sent: _Optional[int] = ...) -> None: ...

class PushSummary(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...
