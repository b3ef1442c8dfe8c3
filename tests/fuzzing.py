"""Fuzz campaigns (Hypothesis): the scenario parser, and every gRPC method of the probe fleet and
of the neighbor control plane, against the real servers over sockets.

    counts = fuzz_scenarios(cases=2000)                    # {"cases": n, "loaded": a, "config_error": b}
    with FleetServer() as srv: counts = fuzz_fleet(srv, cases=2000)
    with NeighborServer(tmp) as srv: counts = fuzz_neighbors(srv, cases=2000)

Properties. Parser: every input (YAML text, ``--set`` words, ``SWARMSCOPE_*`` values) either
loads or raises ConfigError, never another exception. Servers: no call ends UNKNOWN (an
exception escaped a method) or UNAVAILABLE (the server died); they still answer a legitimate
call afterwards; their RSS grows by less than ``RSS_BOUND`` over the campaign. Messages are
random protobufs (random field values, oversized strings and blobs), random bytes sent raw on
a method's path, with the right token, a wrong one and none.

Used by tests/test_fuzz.py (small budgets) and bench/fuzz.py (the counts in the report).
Caveat: the servers run in their own processes so their memory can be measured; a Watch is
called with a short deadline so the fuzzer's calls do not pile up on the server's threads.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import psutil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmscope.core import auth
from swarmscope.core.errors import ConfigError
from swarmscope.core.grpcauth import token_channel
from swarmscope.targets.neighbors.server import MAX_MESSAGE_BYTES, start_server, stop
from swarmscope.v1 import neighbors_pb2 as npb
from swarmscope.v1 import neighbors_pb2_grpc as npbg
from swarmscope.v1 import probe_pb2 as ppb
from swarmscope.v1 import probe_pb2_grpc as ppbg

RSS_BOUND = 96 << 20  # what a server may grow by over a whole campaign
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE}
FLEET_MAX_FUZZ_BYTES = 8 << 20  # the fleet takes up to 512 MiB; the fuzzer sends up to this


def _settings(cases: int) -> Any:
    return settings(
        max_examples=cases,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )


# -- strategies ----------------------------------------------------------------------------------
def sized_text(limit: int) -> st.SearchStrategy[str]:
    """Short random text, or a long run of one character (cheap to make, up to ``limit``)."""
    return st.one_of(st.text(max_size=40), st.integers(0, limit).map(lambda n: "é" * (n // 2)))


def sized_bytes(limit: int) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=64),
        st.integers(0, limit).map(lambda n: os.urandom(min(n, 1024)) * (n // 1024 + 1)),
    )


NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", ".nan", "inf", "-.inf", "1e999", "0x10", "1_000", "", " ", "-0", "1,2,,3"]),
)
SCALARS = st.one_of(NUMBERS, st.booleans(), st.none(), st.text(max_size=30), sized_text(20000))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


def scenario_keys() -> list[str]:
    from swarmscope.kinds import KINDS, get_kind

    keys = {"scenario"}
    for k in KINDS:
        keys |= set(get_kind(k).schema.fields)
    return sorted(keys)


# -- the scenario parser -------------------------------------------------------------------------
def fuzz_scenarios(cases: int) -> dict[str, int]:
    """Random scenario files, --set words and environments through ``kinds.load_scenario``."""
    import yaml

    from swarmscope.kinds import KINDS, get_kind, load_scenario

    keys = scenario_keys()
    env_vars = sorted({f.env_var for k in KINDS for f in get_kind(k).schema.fields.values()})
    counts: collections.Counter[str] = collections.Counter()
    tmp = Path(tempfile.mkdtemp(prefix="ss-fuzz-scn-"))

    def yaml_text(doc: Any) -> str:
        try:
            return yaml.safe_dump(doc, allow_unicode=True)
        except yaml.YAMLError:
            return repr(doc)

    docs = st.one_of(
        st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=12)), VALUES, max_size=8).map(
            yaml_text
        ),
        st.dictionaries(st.sampled_from(keys), VALUES, max_size=6).map(
            lambda d: yaml_text({**d, "scenario": d.get("scenario", "exec_storm")})
        ),
        st.sampled_from([f"scenario: {k}\n" for k in KINDS]),  # a file must name its kind
        st.text(max_size=300),  # not YAML, or YAML of the wrong shape
        st.sampled_from(
            ["a: &x [*x]", "? [a]\n: 1", "- 1", "a: !!python/object:os.system x", "{" * 400, "\t\x00"]
        ),
    )
    raw = st.one_of(st.none(), st.binary(max_size=200))  # undecodable files
    sets = st.lists(
        st.one_of(
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from(keys), st.text(max_size=30)),
            st.text(max_size=40),
        ),
        max_size=4,
    )
    envs = st.dictionaries(st.sampled_from(env_vars), st.text(max_size=30), max_size=3)

    @_settings(cases)
    @given(docs, raw, sets, envs)
    def one(doc: str, raw_bytes: bytes | None, set_words: list[str], env: dict[str, str]) -> None:
        # A new path each case: a process reads a scenario file once (kinds.scenario_text).
        path = tmp / f"s{counts['cases']}.yaml"
        if raw_bytes is not None:
            path.write_bytes(raw_bytes)
        else:
            path.write_text(doc, encoding="utf-8", errors="surrogatepass")
        counts["cases"] += 1
        try:
            load_scenario(str(path), set_words, env=env)
            counts["loaded"] += 1
        except ConfigError:
            counts["config_error"] += 1

    try:
        one()
    finally:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return dict(counts)


# -- servers in their own processes -------------------------------------------------------------
_FLEET_MAIN = """
import sys
from swarmscope.core import auth
from swarmscope.controller.fleet import Fleet
fleet = Fleet(token=auth.load_token(), bind="127.0.0.1:0")
print(fleet.start(), flush=True)
sys.stdin.read()
fleet.stop()
"""


def handshake(stub: Any, token: str, probe_id: str) -> str:
    """A legitimate probe's handshake (Hello, the controller's proof checked, then Register
    with the probe's proof); the session id."""
    pn = auth.new_nonce()
    key = auth.node_key(token, probe_id)  # each fuzzing probe speaks for a node of its own name
    hello = stub.Hello(ppb.HelloRequest(probe_nonce=pn, probe_id=probe_id, node=probe_id), timeout=10)
    assert auth.check(auth.controller_proof(key, pn, hello.server_nonce), hello.proof)
    reply = stub.Register(
        ppb.RegisterRequest(
            probe_id=probe_id,
            hostname=probe_id,
            nonce=pn,
            server_nonce=hello.server_nonce,
            proof=auth.probe_proof(key, hello.server_nonce, pn, probe_id),
        ),
        timeout=10,
    )
    return str(reply.session_id)


class FleetServer:
    """The probe fleet's gRPC server (controller.fleet.Fleet) alone in a child process."""

    def __init__(self) -> None:
        self.token = auth.new_token()
        env = {**os.environ, auth.TOKEN_ENV: self.token}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FLEET_MAIN],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.address = f"127.0.0.1:{int(self.proc.stdout.readline())}"

    def rss(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def alive(self) -> bool:
        """Up, and a legitimate probe still registers (the proof checks out)."""
        if self.proc.poll() is not None:
            return False
        with grpc.insecure_channel(self.address) as ch:
            return bool(handshake(ppbg.ProbeControlStub(ch), self.token, "fuzz-check"))

    def __enter__(self) -> FleetServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class NeighborServer:
    """The neighbor control plane (targets.neighbors.server) as the kinds start it."""

    def __init__(self, work: Path):
        self.cp = start_server(str(work / "fuzz.db"))
        self.address, self.token = self.cp.address, self.cp.token

    def rss(self) -> int:
        return int(psutil.Process(self.cp.proc.pid).memory_info().rss)

    def alive(self) -> bool:
        if self.cp.proc.poll() is not None:
            return False
        with token_channel(self.address, self.token) as ch:
            npbg.NeighborStoreStub(ch).Status(npb.StatusRequest(), timeout=10)
        return True

    def __enter__(self) -> NeighborServer:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        stop(self.cp.proc)


# -- calling with random messages ----------------------------------------------------------------
def _call(counts: collections.Counter[str], fn: Any) -> None:
    counts["cases"] += 1
    try:
        fn()
        counts["ok"] += 1
    except grpc.RpcError as e:
        code = e.code()
        counts[code.name] += 1
        if code in BAD:
            raise AssertionError(f"server answered {code.name}: {e.details()}") from e


def _raw(
    channel: grpc.Channel, path: str, streaming: tuple[bool, bool], payloads: list[bytes], md: Any
) -> Any:
    ident = {"request_serializer": None, "response_deserializer": None}
    if streaming == (False, False):
        return channel.unary_unary(path, **ident)(payloads[0], metadata=md, timeout=5)
    if streaming == (False, True):
        return list(channel.unary_stream(path, **ident)(payloads[0], metadata=md, timeout=2))
    if streaming == (True, False):
        return channel.stream_unary(path, **ident)(iter(payloads), metadata=md, timeout=5)
    return list(channel.stream_stream(path, **ident)(iter(payloads), metadata=md, timeout=2))


TOKENS = st.sampled_from(["good", "bad", "none"])


def _md(which: str, token: str) -> list[tuple[str, str]]:
    return {"good": [(auth.TOKEN_HEADER, token)], "bad": [(auth.TOKEN_HEADER, "x" * 43)], "none": []}[which]


def _campaign(server: Any, cases: int, body: Any) -> dict[str, int]:
    """Run ``body(counts)`` (a Hypothesis test) and check the server's health and memory."""
    counts: collections.Counter[str] = collections.Counter()
    body(counts, warmup=True)
    base = server.rss()
    body(counts, warmup=False)
    grown = server.rss() - base
    assert server.alive(), "the server no longer answers a legitimate call"
    assert grown < RSS_BOUND, f"server RSS grew by {grown >> 20} MiB"
    out = dict(counts)
    out["rss_growth_kib"] = grown >> 10
    return out


def fuzz_fleet(server: FleetServer, cases: int) -> dict[str, int]:
    """Hello, Register and Session with random messages, raw bytes, oversized fields; the real
    handshake (Hello, then the proof) for valid sessions, bad or no token otherwise."""
    probe_ids = st.sampled_from([f"fuzz-{i}" for i in range(16)])  # re-registration replaces
    register = st.builds(
        ppb.RegisterRequest,
        probe_id=probe_ids,
        hostname=sized_text(1 << 20),
        node_name=st.text(max_size=20),
        kernel_release=st.text(max_size=20),
        programs=st.lists(sized_text(1 << 16), max_size=4),
        nonce=sized_bytes(4096),
        version=st.text(max_size=10),
    )
    reading = st.builds(
        ppb.Reading,
        window_id=st.text(max_size=8),
        node=sized_text(1 << 16),
        counters=st.dictionaries(st.text(max_size=8), st.integers(0, 2**64 - 1), max_size=4),
        gauges=st.dictionaries(st.text(max_size=8), st.floats(), max_size=4),
    )
    message = st.one_of(
        st.builds(
            ppb.ProbeMessage,
            session_id=st.text(max_size=40),
            heartbeat=st.builds(ppb.Heartbeat, unix_ns=st.integers(0, 2**64 - 1), cpu_percent=st.floats()),
        ),
        st.builds(ppb.ProbeMessage, session_id=st.text(max_size=40), reading=reading),
        st.builds(
            ppb.ProbeMessage,
            session_id=st.text(max_size=40),
            done=st.builds(
                ppb.WindowDone, window_id=st.text(max_size=8), batch=st.lists(reading, max_size=3)
            ),
        ),
        st.builds(
            ppb.ProbeMessage,
            session_id=st.text(max_size=40),
            ack=st.builds(ppb.WindowAck, window_id=st.text(max_size=8), error=sized_text(1 << 16)),
        ),
    )
    raw = st.one_of(st.binary(max_size=256), st.integers(0, FLEET_MAX_FUZZ_BYTES).map(lambda n: b"\x0a" * n))
    what = st.sampled_from(["hello", "register", "session", "raw_register", "raw_session"])
    hello = st.builds(ppb.HelloRequest, probe_nonce=sized_bytes(4096), probe_id=sized_text(1 << 16))
    ch = grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", -1)])
    stub = ppbg.ProbeControlStub(ch)

    def body(counts: collections.Counter[str], warmup: bool) -> None:
        @_settings(max(10, cases // 10) if warmup else cases)
        @given(
            what,
            TOKENS,
            register,
            st.lists(message, max_size=4),
            st.lists(raw, min_size=1, max_size=3),
            st.booleans(),
            hello,
        )
        def one(
            kind: str,
            tok: str,
            reg: Any,
            msgs: list[Any],
            payloads: list[bytes],
            valid_session: bool,
            hello_req: Any,
        ) -> None:
            md = _md(tok, server.token)
            if kind == "register":
                _call(counts, lambda: stub.Register(reg, metadata=md, timeout=10))
            elif kind == "hello":
                _call(counts, lambda: stub.Hello(hello_req, metadata=md, timeout=10))
            elif kind == "session":
                if valid_session and tok == "good" and msgs:
                    # The real handshake: Hello, check nothing, answer the server nonce.
                    msgs[0].session_id = handshake(stub, server.token, "fuzz-s")
                _call(counts, lambda: list(stub.Session(iter(msgs), metadata=md, timeout=1)))
            elif kind == "raw_register":
                _call(
                    counts,
                    lambda: _raw(ch, "/swarmscope.v1.ProbeControl/Register", (False, False), payloads, md),
                )
            else:
                _call(
                    counts,
                    lambda: _raw(ch, "/swarmscope.v1.ProbeControl/Session", (True, True), payloads, md),
                )

        one()

    try:
        return _campaign(server, cases, body)
    finally:
        ch.close()


def fuzz_neighbors(server: NeighborServer, cases: int) -> dict[str, int]:
    """Every NeighborStore method with random requests, malformed and oversized batches, raw
    bytes; three tokens. Valid writes stay in a small key space, so the state stays small."""
    ip = st.one_of(st.integers(0, 2**32 - 1), st.integers(0, 4095))
    entries = st.integers(0, 256).map(
        lambda n: (b"".join(i.to_bytes(4, "big") for i in range(n)), os.urandom(12 * n))
    )
    batch = st.one_of(
        entries.map(lambda kv: npb.NeighborBatch(keys=kv[0], values=kv[1])),  # well formed
        st.builds(
            npb.NeighborBatch,
            keys=sized_bytes(4096),
            values=sized_bytes(4096),
            deleted=sized_bytes(4096),
            revision=st.integers(0, 2**64 - 1),
            last=st.booleans(),
            client_ns=st.integers(-(2**63), 2**63 - 1),
        ),
        st.integers(MAX_MESSAGE_BYTES - 64, MAX_MESSAGE_BYTES + 4096).map(
            lambda n: npb.NeighborBatch(keys=b"\0" * n)
        ),
    )
    value = st.one_of(st.just(b"\x02" * 12), sized_bytes(64))
    raw = st.one_of(st.binary(max_size=256), st.integers(0, 4 << 20).map(lambda n: b"\x0a" * n))
    method = st.sampled_from(["Put", "PutBatch", "Delete", "Get", "List", "Watch", "Status", "raw"])
    streaming = {
        "Put": (False, False),
        "PutBatch": (True, True),
        "Delete": (False, False),
        "Get": (False, False),
        "List": (False, True),
        "Watch": (False, True),
        "Status": (False, False),
    }
    ch = grpc.insecure_channel(server.address, options=[("grpc.max_send_message_length", -1)])
    stub = npbg.NeighborStoreStub(ch)

    def body(counts: collections.Counter[str], warmup: bool) -> None:
        @_settings(max(10, cases // 10) if warmup else cases)
        @given(
            method,
            TOKENS,
            ip,
            value,
            st.lists(batch, max_size=3),
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**32 - 1),
            st.sampled_from(sorted(streaming)),
            st.lists(raw, min_size=1, max_size=3),
        )
        def one(
            m: str,
            tok: str,
            key: int,
            val: bytes,
            batches: list[Any],
            rev: int,
            page: int,
            raw_m: str,
            payloads: list[bytes],
        ) -> None:
            md = _md(tok, server.token)
            rev = rev if rev % 3 else rev % 64  # often a revision that exists
            calls = {
                "Put": lambda: stub.Put(
                    npb.PutRequest(neighbor=npb.Neighbor(ip=key, value=val)), metadata=md, timeout=10
                ),
                "PutBatch": lambda: list(stub.PutBatch(iter(batches), metadata=md, timeout=30)),
                "Delete": lambda: stub.Delete(npb.DeleteRequest(ip=key), metadata=md, timeout=10),
                "Get": lambda: stub.Get(npb.GetRequest(ip=key), metadata=md, timeout=10),
                "List": lambda: list(
                    stub.List(npb.ListRequest(revision=rev, page_size=page), metadata=md, timeout=10)
                ),
                "Watch": lambda: list(
                    stub.Watch(npb.WatchRequest(start_revision=rev), metadata=md, timeout=0.3)
                ),
                "Status": lambda: stub.Status(npb.StatusRequest(), metadata=md, timeout=10),
                "raw": lambda: _raw(
                    ch, f"/swarmscope.v1.NeighborStore/{raw_m}", streaming[raw_m], payloads, md
                ),
            }
            _call(counts, calls[m])

        one()

    try:
        return _campaign(server, cases, body)
    finally:
        ch.close()


if __name__ == "__main__":
    sys.exit("run bench/fuzz.py or tests/test_fuzz.py")
