from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NeighborBatch(_message.Message):
    __slots__ = ("keys", "values", "deleted", "revision", "last", "client_ns")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NS_FIELD_NUMBER: _ClassVar[int]
    keys: bytes
    values: bytes
    deleted: bytes
    revision: int
    last: bool
    client_ns: int
    def __init__(self, keys: _Optional[bytes] = ..., values: _Optional[bytes] = ..., deleted: _Optional[bytes] = ..., revision: _Optional[int] = ..., last: bool = ..., client_ns: _Optional[int] = ...) -> None: ...

class BatchAck(_message.Message):
    __slots__ = ("revision", "count", "server_ns")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SERVER_NS_FIELD_NUMBER: _ClassVar[int]
    revision: int
    count: int
    server_ns: int
    def __init__(self, revision: _Optional[int] = ..., count: _Optional[int] = ..., server_ns: _Optional[int] = ...) -> None: ...

class Neighbor(_message.Message):
    __slots__ = ("ip", "value", "mod_revision")
    IP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    ip: int
    value: bytes
    mod_revision: int
    def __init__(self, ip: _Optional[int] = ..., value: _Optional[bytes] = ..., mod_revision: _Optional[int] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("neighbor",)
    NEIGHBOR_FIELD_NUMBER: _ClassVar[int]
    neighbor: Neighbor
    def __init__(self, neighbor: _Optional[_Union[Neighbor, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: int
    def __init__(self, ip: _Optional[int] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("revision", "existed")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    existed: bool
    def __init__(self, revision: _Optional[int] = ..., existed: bool = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: int
    def __init__(self, ip: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "neighbor", "revision")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOR_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    found: bool
    neighbor: Neighbor
    revision: int
    def __init__(self, found: bool = ..., neighbor: _Optional[_Union[Neighbor, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("revision", "page_size")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    revision: int
    page_size: int
    def __init__(self, revision: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("start_revision",)
    START_REVISION_FIELD_NUMBER: _ClassVar[int]
    start_revision: int
    def __init__(self, start_revision: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("revision", "entries", "watchers")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WATCHERS_FIELD_NUMBER: _ClassVar[int]
    revision: int
    entries: int
    watchers: int
    def __init__(self, revision: _Optional[int] = ..., entries: _Optional[int] = ..., watchers: _Optional[int] = ...) -> None: ...
