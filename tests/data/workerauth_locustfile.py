"""A bare locustfile with swarmscope's worker authentication (tests/test_workerauth.py)."""

from locust import User, constant, task

from swarmscope.app import workerauth

workerauth.install()


class Idle(User):
    wait_time = constant(0.2)

    @task
    def nothing(self) -> None:
        pass
