"""Every route of a Locust web UI with swarmscope's tab and login, asked without logging in.

    python tests/data/webui_routes.py     # prints {"open": [...], "checked": N} as JSON

Run in a process of its own (importing Locust monkey-patches it). Builds Locust's WebUI with
``--web-login`` as Locust does, fires its init event (the plug-in's tab, then the login), and
GETs every rule of ``app.url_map`` with Flask's test client: a rule is open when it answers
anything but a redirect to the login page (or 405 for a POST-only rule). Locust's own login
page, its form's submit and its static assets are meant to be open.
"""

import json
import re
import sys
import types

from locust import events
from locust.env import Environment

from swarmscope.app import weblogin, webui

MEANT_OPEN = {"/login", "/swarmscope_login", "/assets/<path:path>", "/static/<path:filename>"}

env = Environment(events=events)
env.parsed_options = types.SimpleNamespace(web_login=True, web_base_path="")
web_ui = env.create_web_ui("127.0.0.1", 0, web_login=True, delayed_start=True)
webui.install("exec_storm")
env.swarmscope = None  # the plug-in's process state: not set up yet (no run)
weblogin.load_password = lambda: "a-password-for-the-test"  # type: ignore[assignment]
events.init.fire(environment=env, runner=None, web_ui=web_ui)
weblogin.install(env)
client = web_ui.app.test_client()
open_, checked = [], 0
for rule in web_ui.app.url_map.iter_rules():
    if rule.rule in MEANT_OPEN:
        continue
    path = re.sub(r"<[^>]+>", "x", rule.rule)
    method = "GET" if "GET" in (rule.methods or ()) else "POST"
    r = client.open(path, method=method)
    checked += 1
    if not (r.status_code == 302 and "/login" in r.headers.get("Location", "")):
        open_.append(f"{method} {rule.rule} -> {r.status_code}")
print(json.dumps({"open": open_, "checked": checked}))
sys.exit(0)
