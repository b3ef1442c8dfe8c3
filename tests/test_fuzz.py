"""Fuzzing (issue 18): the scenario parser and every gRPC method of the fleet and of the
neighbor control plane, small budgets here; bench/fuzz.py runs the big ones and prints counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FleetServer, NeighborServer, fuzz_fleet, fuzz_neighbors, fuzz_scenarios


@pytest.mark.slow
def test_scenario_parser_loads_or_config_error() -> None:
    # About 3 % of the random files load (a file must name its kind): 400 cases reach both.
    got = fuzz_scenarios(cases=400)
    assert got["cases"] == got.get("loaded", 0) + got.get("config_error", 0) >= 400
    assert got.get("loaded", 0) > 0 and got.get("config_error", 0) > 0  # both outcomes reached


@pytest.mark.slow
def test_fleet_survives_random_and_oversized_messages() -> None:
    with FleetServer() as srv:
        got = fuzz_fleet(srv, cases=60)
    assert got["cases"] >= 60 and got.get("UNAUTHENTICATED", 0) > 0 and got.get("ok", 0) > 0


@pytest.mark.slow
def test_neighbor_control_plane_survives_random_and_oversized_messages(tmp_path: Path) -> None:
    with NeighborServer(tmp_path) as srv:
        got = fuzz_neighbors(srv, cases=80)
    assert got["cases"] >= 80 and got.get("UNAUTHENTICATED", 0) > 0 and got.get("ok", 0) > 0
