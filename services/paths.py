"""Where the project's own topologies and scenarios are (the defaults of every command)."""

from __future__ import annotations

import os

TOPOLOGIES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy", "topologies")
DEFAULT_TOPOLOGY = os.path.join(TOPOLOGIES, "supply-chain.yaml")
DEEP_TOPOLOGY = os.path.join(TOPOLOGIES, "deep.yaml")
SMALL_TOPOLOGY = os.path.join(TOPOLOGIES, "small.yaml")
STORE_TOPOLOGY = os.path.join(TOPOLOGIES, "store.yaml")
HAZMAT_TOPOLOGY = os.path.join(TOPOLOGIES, "hazmat.yaml")
SCENARIOS = os.path.join(os.path.dirname(TOPOLOGIES), "scenarios")
FAN_IN_SCENARIO = os.path.join(SCENARIOS, "fan-in.yaml")
SUPPLY_CHAIN_SCENARIO = os.path.join(SCENARIOS, "supply-chain.yaml")
