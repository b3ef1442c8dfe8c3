"""The probe protocol's message sizes: small until a session is authenticated, large after.

    for m in frames(pb.ProbeMessage(session_id=sid, done=big_done)):   # sender (probe, relay)
        out.put(m)
    joined = Reassembly()                                              # receiver (the fleet)
    msg = joined.add(part_msg)     # None until the last part; then the whole ProbeMessage

gRPC's receive limit is one per server, and every unauthenticated call (``Hello``,
``Register``, a ``Session``'s first message) goes through the same server as the readings. So
the server's limit is ``WIRE_LIMIT`` (1 MiB: a Hello is ~60 bytes, a Register ~1 KiB), which
is what an unauthenticated peer can make it hold per call; a ProbeMessage larger than that (a
WindowDone with map_update samples, a relay's WindowDone for thousands of probes) goes as
``Part`` messages of ``PART_BYTES``, which the fleet joins only on an authenticated session and
only up to ``MAX_MESSAGE_BYTES``. Caveat: a sender that does not split (the Go reader, whose
WindowDone is counters and one sample per node) is limited to ``WIRE_LIMIT`` per message.
"""

from __future__ import annotations

from collections.abc import Iterator

from swarmscope.core.errors import FleetError
from swarmscope.v1 import probe_pb2 as pb

# The fleet's (and relay's) gRPC receive limit: what one call can make the server hold before
# the caller has proven anything.
WIRE_LIMIT = 1 << 20
# Part payloads: under WIRE_LIMIT with room for the envelope (session id, tags).
PART_BYTES = WIRE_LIMIT - 4096
# One logical message of an authenticated session, joined from parts: a WindowDone carries
# every reading of a probe, samples included (~100 bytes each).
MAX_MESSAGE_BYTES = 512 << 20


def frames(msg: pb.ProbeMessage) -> Iterator[pb.ProbeMessage]:
    """``msg`` as it is if it fits on the wire, else as ``Part`` messages of its bytes."""
    if msg.ByteSize() <= PART_BYTES:
        yield msg
        return
    data = msg.SerializeToString()
    if len(data) > MAX_MESSAGE_BYTES:
        raise FleetError(f"a {len(data)}-byte message exceeds the protocol's {MAX_MESSAGE_BYTES} bytes")
    for at in range(0, len(data), PART_BYTES):
        last = at + PART_BYTES >= len(data)
        yield pb.ProbeMessage(
            session_id=msg.session_id, part=pb.Part(data=data[at : at + PART_BYTES], last=last)
        )


class Reassembly:
    """The parts of one session's current message: joined at the last, bounded by ``limit``."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES):
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, msg: pb.ProbeMessage) -> pb.ProbeMessage | None:
        """Keep a ``part``; the joined ProbeMessage at the last one. FleetError if it is over
        ``limit``, nests another part, or does not parse."""
        self._size += len(msg.part.data)
        if self._size > self.limit:
            raise FleetError(f"a message in parts over {self.limit} bytes")
        self._parts.append(msg.part.data)
        if not msg.part.last:
            return None
        data = b"".join(self._parts)
        self._parts, self._size = [], 0
        try:
            whole = pb.ProbeMessage.FromString(data)
        except Exception as e:  # DecodeError, or a recursion limit in a crafted message
            raise FleetError("parts that do not join into a swarmscope.v1.ProbeMessage") from e
        if whole.WhichOneof("kind") == "part":
            raise FleetError("a part inside a part")
        return whole
