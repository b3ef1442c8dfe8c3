"""A bare locustfile with swarmscope's worker authentication (tests/test_workerauth.py): a worker
prints each ``swarmscope:setup`` it takes and the master each ``swarmscope:nodes`` with its
sender, as the plug-in would act on them."""

from typing import Any

from locust import User, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from swarmscope.app import workerauth

workerauth.install()


@events.init.add_listener
def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):

        def on_setup(environment: Any, msg: Any, **_: Any) -> None:
            print(f"worker accepted swarmscope:setup {msg.data}", flush=True)

        runner.register_message("swarmscope:setup", on_setup)
    if isinstance(runner, MasterRunner):

        def on_nodes(environment: Any, msg: Any, **_: Any) -> None:
            print(f"master took swarmscope:nodes from {msg.node_id}", flush=True)

        runner.register_message("swarmscope:nodes", on_nodes)


class Idle(User):
    wait_time = constant(0.2)

    @task
    def nothing(self) -> None:
        pass
