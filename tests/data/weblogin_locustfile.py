"""A bare locustfile with swarmscope's web UI login (tests/test_weblogin.py)."""

from typing import Any

from locust import User, constant, events, task

from swarmscope.app import weblogin


@events.init.add_listener
def _login(environment: Any, **_: Any) -> None:
    weblogin.install(environment)  # what swarmscope's plug-in does at init


class Idle(User):
    wait_time = constant(0.2)

    @task
    def nothing(self) -> None:
        pass
