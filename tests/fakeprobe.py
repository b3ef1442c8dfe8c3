"""A scripted probe client for fleet tests: real gRPC, fixed readings, no BPF.

Also the load of bench/fanin.py: many of these against one controller.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc

from swarmscope import auth
from swarmscope.v1 import probe_pb2 as pb
from swarmscope.v1 import probe_pb2_grpc as pb_grpc


class FakeProbe:
    """Registers, then answers every window with ``counters`` for each node it is given."""

    def __init__(self, address: str, token: str, node: str, counters: dict[str, int] | None = None):
        self.address, self.token, self.node = address, token, node
        self.counters = counters or {"exec": 7}
        self.samples: list[pb.Sample] = []  # put in every reading
        self.out: queue.Queue[pb.ProbeMessage | None] = queue.Queue()
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ProbeControlStub(self.channel)
        self.md = [(auth.TOKEN_HEADER, token)]
        self.session_id = ""
        self.silent = False  # stop answering (a probe that hangs)
        self.commands: list[pb.Command] = []
        self.thread: threading.Thread | None = None

    def register(self) -> pb.RegisterReply:
        nonce = auth.new_nonce()
        reply = self.stub.Register(
            pb.RegisterRequest(
                probe_id=f"fake-{self.node}", hostname=self.node, node_name=self.node, nonce=nonce
            ),
            metadata=self.md,
            timeout=10,
        )
        assert auth.verify(self.token, nonce, reply.proof), "controller proof does not verify"
        self.session_id = reply.session_id
        return reply

    def _messages(self) -> Iterator[pb.ProbeMessage]:
        yield pb.ProbeMessage(session_id=self.session_id, heartbeat=pb.Heartbeat(unix_ns=1))
        while True:
            m = self.out.get()
            if m is None:
                return
            yield m

    def start(self) -> FakeProbe:
        self.register()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        windows: dict[str, list[pb.NodeInfo]] = {}
        try:
            for cmd in self.stub.Session(self._messages(), metadata=self.md):
                self.commands.append(cmd)
                if self.silent:
                    continue
                kind = cmd.WhichOneof("kind")
                if kind == "open":
                    windows[cmd.open.window_id] = list(cmd.open.nodes)
                    self.out.put(
                        pb.ProbeMessage(
                            ack=pb.WindowAck(run_id=cmd.open.run_id, window_id=cmd.open.window_id, ok=True)
                        )
                    )
                elif kind == "close":
                    nodes = windows.pop(cmd.close.window_id, [])
                    batch = [
                        pb.Reading(
                            run_id=cmd.close.run_id,
                            window_id=cmd.close.window_id,
                            probe_id=f"fake-{self.node}",
                            node=n.name,
                            counters=self.counters,
                            samples=self.samples,
                        )
                        for n in nodes
                    ]
                    self.out.put(
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
            self.out.put(None)

    def stop(self) -> None:
        self.out.put(None)
        self.channel.close()
