"""Writes the chart's kind-scoped scenario options from the kinds' own fields (one source).

    python tools/chart_kinds.py --check    # exit 1 when the chart is out of date (a test runs it)
    python tools/chart_kinds.py --write    # after adding or renaming a kind's option

The chart (charts/swarmscope) takes the options every kind has under ``scenario.config`` and
each kind's own under ``scenario.<kind>``: only the chosen kind's section is used, so
``helm upgrade --reuse-values --set scenario.config.scenario=ingress_flood`` does not carry the
exec storm's options into an ingress flood. Two generated places follow the code:
- ``values.schema.json``: ``scenario.config`` (the common options and the kind) and one
  ``scenario.<kind>`` object per chart kind, closed (``additionalProperties: false``), so a
  misspelt or misplaced option fails ``helm install``/``lint`` instead of crash-looping the
  controller;
- ``templates/_kinds.tpl``: the same option names for the template's check of
  ``scenario.config`` (Helm does not give templates the schema), whose message names the
  section a kind's option belongs in.

Caveat: types only (and choices); ranges stay the controller's check at start.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "swarmscope"
SCHEMA = CHART / "values.schema.json"
TPL = CHART / "templates" / "_kinds.tpl"
_JSON = {int: "integer", float: "number", str: "string", bool: "boolean"}
_DECIMAL = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"  # a float as --set gives it


def _prop(f: Any) -> dict[str, Any]:
    """The JSON schema of one config Field (swarmscope.core.config.Field)."""
    t = f.type
    if isinstance(t, tuple):  # list_of(item)
        out: dict[str, Any] = {"type": "array", "items": {"type": _JSON[t[1]]}}
        if f.choices:
            out["items"]["enum"] = list(f.choices)
    elif t in _JSON:
        out = {"type": _JSON[t]}
        if t is float:
            # helm's --set types integers only: `--set scenario.exec_storm.burst_s=0.3` arrives
            # as the string "0.3" (YAML and --set-json give a number). The controller reads
            # either (swarmscope/config.py), so the schema takes a number or a decimal string.
            out = {"type": ["number", "string"], "pattern": _DECIMAL}
        if f.choices:
            out["enum"] = list(f.choices)
    else:  # free-form (e.g. a command line: a string or a list)
        out = {}
    if f.nullable and "type" in out:
        kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*kinds, "null"]
    if f.help:
        out["description"] = f.help
    return out


def fields() -> tuple[list[Any], dict[str, list[Any]], dict[str, str]]:
    """The common fields, each chart kind's own, and the kinds the chart refuses with why
    (all from the kind registry: a kind says ``not_in_cluster`` when the chart cannot run it)."""
    from swarmscope.controller.options import COMMON_FIELDS
    from swarmscope.kinds import KINDS, get_kind

    kinds = [get_kind(k) for k in KINDS]
    runs = {k.name: list(k.fields()) for k in kinds if not k.not_in_cluster}
    return list(COMMON_FIELDS), runs, {k.name: k.not_in_cluster for k in kinds if k.not_in_cluster}


def scenario_schema(
    common: list[Any], kinds: dict[str, list[Any]], refused: dict[str, str]
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "type": "object",
        "description": "Options every kind takes (the kind's own go under scenario.<kind>).",
        "required": ["scenario"],
        # Open: a kind's option here gets the template's message naming its section instead.
        "properties": {f.key: _prop(f) for f in common},
    }
    # Every kind of the registry: one the chart cannot run is refused by the template, with why.
    config["properties"]["scenario"] = {"type": "string", "enum": [*kinds, *refused]}
    props: dict[str, Any] = {"existingConfigMap": {"type": "string"}, "config": config}
    for k, fs in kinds.items():
        props[k] = {
            "type": "object",
            "description": f"The {k} scenario's own options (used when scenario.config.scenario={k}).",
            "additionalProperties": False,
            "properties": {f.key: _prop(f) for f in fs},
        }
    return {"type": "object", "additionalProperties": False, "properties": props}


def schema_text(text: str, scenario: dict[str, Any]) -> str:
    """``text`` (values.schema.json) with its top-level "scenario" object replaced; the rest of
    the file keeps its formatting."""
    key = '\n    "scenario": '
    start = text.index(key) + len(key)
    _, end = json.JSONDecoder().raw_decode(text, start)
    body = json.dumps(scenario, indent=2).replace("\n", "\n    ")
    return text[:start] + body + text[end:]


def tpl_text(common: list[Any], kinds: dict[str, list[Any]], refused: dict[str, str]) -> str:
    names = {"config": [f.key for f in common], **{k: [f.key for f in fs] for k, fs in kinds.items()}}
    return (
        "{{- /* Generated by tools/chart_kinds.py from the kinds' fields: do not edit.\n"
        "       The options of scenario.config (common) and of each scenario.<kind>; the kinds the\n"
        "       chart refuses, with why. */ -}}\n"
        '{{- define "swarmscope.kindOptions" -}}\n'
        f"{json.dumps(names, separators=(',', ':'))}\n"
        "{{- end -}}\n"
        '{{- define "swarmscope.kindsRefused" -}}\n'
        f"{json.dumps(refused, separators=(',', ':'))}\n"
        "{{- end -}}\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the chart's generated parts")
    ap.add_argument("--check", action="store_true", help="exit 1 when they are out of date")
    args = ap.parse_args(argv)
    common, kinds, refused = fields()
    want = {
        SCHEMA: schema_text(SCHEMA.read_text(), scenario_schema(common, kinds, refused)),
        TPL: tpl_text(common, kinds, refused),
    }
    stale = [p for p, t in want.items() if not p.exists() or p.read_text() != t]
    if args.write:
        for p in stale:
            p.write_text(want[p])
            print(f"wrote {p.relative_to(ROOT)}")
        return 0
    for p in stale:
        print(f"{p.relative_to(ROOT)} is out of date: run python tools/chart_kinds.py --write")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
