"""The locustfile of ``swarmscope worker``: a Locust worker that takes its kind from the master.

    swarmscope worker --controller HOST             # any kind: the controller's
    swarmscope worker --controller HOST --kind X    # refuses a controller that runs another kind

The kind arrives with the run's config in the master's ``swarmscope:setup``; the worker then
takes the User classes, shape and init hooks of that kind's locustfile (``scenarios/<kind>.py``),
as if it had started on it (swarmscope.app.plugin._learn_kind). Caveat: Locust starts only with a User
class, hence the placeholder below, which no master ever spawns.
"""

from locust import User

from swarmscope.app import plugin

plugin.install(None)


class AwaitingTheMastersKind(User):
    """Lets Locust start; replaced by the kind's User classes at the master's set-up."""


__all__ = ["AwaitingTheMastersKind"]
