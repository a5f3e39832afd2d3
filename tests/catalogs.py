"""Catalogs for unit tests of pure logic: a topology's, as the MDR would hold it once its nodes run."""

from __future__ import annotations

from dataclasses import replace

from glue.catalog import Catalog, ExportedView, Relation
from glue.standing import standing_views
from glue.standing import topology_catalog as standing_catalog
from glue.topology import load_topology
from services.paths import DEFAULT_TOPOLOGY


def supply_chain_catalog(extra_views: tuple[ExportedView, ...] = ()) -> Catalog:
    return topology_catalog(DEFAULT_TOPOLOGY, extra_views)


def topology_catalog(path: str, extra_views: tuple[ExportedView, ...] = ()) -> Catalog:
    """The catalog of a topology file: its standing views exported where they are placed, and
    receptor_locations holding the topology's receptors (the hierarchy derives it the same way)."""
    topology = load_topology(path)
    catalog = standing_catalog(topology)
    if "receptor_locations" in catalog.relations:
        relation = catalog.relations["receptor_locations"]
        rows = tuple((r.id, r.location) for r in topology.receptors) + relation.rows
        catalog.relations["receptor_locations"] = Relation(relation.name, relation.columns, rows, relation.replicas)
    views = [s.export for s in standing_views(topology, catalog)]
    return replace(catalog, views=views + list(extra_views))
