"""A scripted probe client for fleet tests: real gRPC, fixed readings, no BPF.

Also the load of bench/fanin.py and bench/reconnect.py: many of these against one controller.
``reconnect()`` drops the session and registers again under the same probe id, keeping its open
windows, as the real agent does after a lost connection.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc

from swarmscope.core import auth
from swarmscope.core.wire import frames
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc


class FakeProbe:
    """Registers, then answers every window with ``counters`` for each node it is given."""

    def __init__(
        self,
        address: str,
        token: str,
        node: str,
        counters: dict[str, int] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: list[tuple[str, str]] | None = None,
        probe_id: str = "",
        node_key: str = "",
    ):
        """``token``: the fleet token (it derives its node's key), or ``node_key`` given instead."""
        self.address, self.token, self.node, self.node_key = address, token, node, node_key
        self.counters = counters or {"exec": 7}
        self.samples: list[pb.Sample] = []  # put in every reading
        self.out: queue.Queue[pb.ProbeMessage | None] = queue.Queue()
        if credentials is not None:
            self.channel = grpc.secure_channel(address, credentials, options or [])
        else:
            self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ProbeControlStub(self.channel)
        self.probe_id = probe_id or f"fake-{node}"
        self.session_id = ""
        self.reply = pb.RegisterReply()  # the last Register's (its heartbeat interval)
        self.silent = False  # stop answering (a probe that hangs)
        self.commands: list[pb.Command] = []
        self.windows: dict[str, list[pb.NodeInfo]] = {}  # open windows survive a reconnect
        self.closed: dict[str, list[pb.Reading]] = {}  # a close sent again gets the same answer
        self.thread: threading.Thread | None = None
        self._call: grpc.Future | None = None
        self.sessions = 0

    def register(self) -> pb.RegisterReply:
        nonce = auth.new_nonce()
        key = self.node_key or auth.node_key(self.token, self.node)
        hello = self.stub.Hello(
            pb.HelloRequest(probe_nonce=nonce, probe_id=self.probe_id, node=self.node), timeout=10
        )
        assert auth.check(auth.controller_proof(key, nonce, hello.server_nonce), hello.proof), (
            "controller proof does not verify"
        )
        reply = self.stub.Register(
            pb.RegisterRequest(
                probe_id=self.probe_id,
                hostname=self.node,
                node_name=self.node,
                nonce=nonce,
                server_nonce=hello.server_nonce,
                proof=auth.probe_proof(key, hello.server_nonce, nonce, self.probe_id),
            ),
            timeout=10,
        )
        self.session_id = reply.session_id
        self.reply = reply
        return reply

    def _messages(self, out: queue.Queue[pb.ProbeMessage | None]) -> Iterator[pb.ProbeMessage]:
        yield pb.ProbeMessage(session_id=self.session_id, heartbeat=pb.Heartbeat(unix_ns=1))
        while True:
            m = out.get()
            if m is None:
                return
            yield from frames(m)

    def start(self) -> FakeProbe:
        self.register()
        self.out = queue.Queue()
        self._call = self.stub.Session(self._messages(self.out))
        self.sessions += 1
        self.thread = threading.Thread(target=self._run, args=(self._call, self.out), daemon=True)
        self.thread.start()
        return self

    def reconnect(self) -> None:
        """Cut the session (as a lost connection does) and register again, same probe id."""
        call, thread = self._call, self.thread
        if call is not None:
            call.cancel()
        if thread is not None:
            thread.join(10)
        self.start()

    def _run(self, call: grpc.Future, out: queue.Queue[pb.ProbeMessage | None]) -> None:
        try:
            for cmd in call:
                self.commands.append(cmd)
                if self.silent:
                    continue
                kind = cmd.WhichOneof("kind")
                if kind == "open":
                    self.windows[cmd.open.window_id] = list(cmd.open.nodes)
                    out.put(
                        pb.ProbeMessage(
                            ack=pb.WindowAck(run_id=cmd.open.run_id, window_id=cmd.open.window_id, ok=True)
                        )
                    )
                elif kind == "close" and cmd.close.window_id in self.closed:
                    batch = self.closed[cmd.close.window_id]
                    done = pb.WindowDone(
                        run_id=cmd.close.run_id,
                        window_id=cmd.close.window_id,
                        readings=len(batch),
                        batch=batch,
                    )
                    out.put(pb.ProbeMessage(done=done))
                elif kind == "close":
                    nodes = self.windows.pop(cmd.close.window_id, [])
                    batch = self.closed[cmd.close.window_id] = [
                        pb.Reading(
                            run_id=cmd.close.run_id,
                            window_id=cmd.close.window_id,
                            probe_id=self.probe_id,
                            node=n.name,
                            counters=self.counters,
                            samples=self.samples,
                        )
                        for n in nodes
                    ]
                    out.put(
                        pb.ProbeMessage(
                            done=pb.WindowDone(
                                run_id=cmd.close.run_id,
                                window_id=cmd.close.window_id,
                                readings=len(nodes),
                                batch=batch,
                            )
                        )
                    )
                elif kind == "shutdown":
                    break
        except grpc.RpcError:
            pass
        finally:
            out.put(None)

    def stop(self) -> None:
        self.out.put(None)
        self.channel.close()
