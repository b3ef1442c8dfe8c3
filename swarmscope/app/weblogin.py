"""The Locust web UI behind Locust's own login page (``--web-login``), with one shared password.

    SWARMSCOPE_WEB_PASSWORD_FILE=/etc/swarmscope/web/password locust -f scenarios/exec_storm.py --web-login
    swarmscope controller --scenario s.yaml        # the cluster controller turns --web-login on

Locust's ``--web-login`` guards every UI route (``/``, ``/swarm``, ``/stop``, ``/stats/*``, …)
with flask-login and shows its login page; the locustfile supplies the user loader and the
form's submit route, which this module does (called from the plug-in's init hook). One user,
any name; the password comes from ``$SWARMSCOPE_WEB_PASSWORD_FILE`` (else
``$SWARMSCOPE_WEB_PASSWORD``) and is compared in constant time. Failed logins are slowed down.
The session cookie is HttpOnly and SameSite=Strict (a page on another site cannot drive the UI
with it), and the Flask secret key is random per process, so a restart logs everyone out.
Caveat: over plain HTTP the password crosses the wire in the clear: keep the UI on 127.0.0.1
(reach it with ``kubectl port-forward``) or give Locust ``--tls-cert``/``--tls-key``.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import time
from typing import Any

from swarmscope.core.errors import SetupError

log = logging.getLogger(__name__)

ENV_PASSWORD = "SWARMSCOPE_WEB_PASSWORD"
ENV_PASSWORD_FILE = "SWARMSCOPE_WEB_PASSWORD_FILE"
FAILED_LOGIN_DELAY_S = 1.0


def load_password() -> str:
    from swarmscope.core.auth import read_secret

    pw = read_secret(os.environ.get(ENV_PASSWORD_FILE), ENV_PASSWORD, "the web UI password")
    if len(pw) < 8:
        raise SetupError(
            f"--web-login needs a password of 8+ characters in ${ENV_PASSWORD_FILE} or ${ENV_PASSWORD}"
        )
    return pw


def install(environment: Any) -> bool:
    """Wire the login into ``environment.web_ui`` when Locust runs with ``--web-login``."""
    web_ui = getattr(environment, "web_ui", None)
    opts = getattr(environment, "parsed_options", None)
    if web_ui is None or not getattr(opts, "web_login", False):
        return False
    from flask import Blueprint, redirect, request, session, url_for
    from flask_login import UserMixin, login_user

    password = load_password()

    class _User(UserMixin):
        def __init__(self, name: str):
            self.id = name

    base = getattr(opts, "web_base_path", None) or ""
    app = web_ui.app
    app.config.update(
        SECRET_KEY=secrets.token_bytes(32),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
    )
    web_ui.login_manager.user_loader(_User)
    web_ui.auth_args = {"username_password_callback": f"{base}/swarmscope_login"}
    bp = Blueprint("swarmscope_login", __name__, url_prefix=base or None)

    @bp.route("/swarmscope_login", methods=["POST"])
    def submit() -> Any:
        given = request.form.get("password", "")
        if hmac.compare_digest(given.encode(), password.encode()):
            login_user(_User(request.form.get("username") or "swarmscope"))
            return redirect(url_for("locust.index"))
        time.sleep(FAILED_LOGIN_DELAY_S)  # gevent-patched: slows this client, not the UI
        log.warning("web UI: failed login from %s", request.remote_addr)
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    app.register_blueprint(bp)
    return True
