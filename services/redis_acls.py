"""Who may write what in the MDR: a Redis ACL user per service, with the key patterns it needs. Pure.

Every service reads the whole MDR (the catalog is everyone's: a node plans nothing, but it checks
tokens, reads views, desired state and the topology's metadata). Writes are each service's own
(the key layout: mdr/repository.py):

  placement   every key: it is the control plane (queries, desired state, tokens, the metadata)
  dashboard   `endpoint:dashboard` (where it is scraped) and `changes` (every write announces itself)
  node <n>    its own records: node:<n>, node:<n>:alive, stats:<n> and stats:<n>:*, parts:<n>,
              told:<n>, obeyed:<n>, hist:<n>, view:<n>.* (the views it exports), endpoint:node:<n>;
              adoption:<n> (it takes its parts back) and adoption:<d> of each node <d> it may adopt
              (the topology says which: glue.adoption.adopter); and `changes`

So a node cannot mint a token, change what another node runs (desired state; a node checks the
placement service's signature on it anyway: services.part_signing), rewrite another node's
address, endpoints, statistics or views, or take over a node it could never adopt. No set or hash
is shared among writers: the MDR finds nodes, views, adoptions and endpoints by their keys
(mdr.store.Store.ids_of), and an export says only what its key vouches for (mdr.catalog.view_record).
What stays shared is the change feed, a notification that makes readers read again.

>>> from glue.topology import parse_topology
>>> t = parse_topology('''
... name: t
... nodes:
...   - {id: core, tier: core}
...   - {id: wh, tier: aggregation, parent: core}
...   - {id: d1, tier: edge, parent: wh}
... ''')
>>> node_keys(t, "core", "hifi:")[-1], node_keys(t, "d1", "hifi:")[-1]
('hifi:adoption:wh', 'hifi:adoption:d1')
>>> sorted(rules_by_user(t))
['dashboard', 'node-core', 'node-d1', 'node-wh', 'placement']
>>> rules_by_user(t)["dashboard"]
('resetchannels', '+@all', '-@dangerous', '%R~hifi:*', '~hifi:endpoint:dashboard', '~hifi:changes')
"""

from __future__ import annotations

from glue.adoption import may_adopt
from glue.topology import Topology
from services.deploy_names import node_service

# what every HiFi service may run: every command but the administrative and dangerous ones
# (FLUSHALL, KEYS, CONFIG, ACL, DEBUG, SHUTDOWN, ...); no pub/sub channel (the MDR uses none)
COMMANDS = ("resetchannels", "+@all", "-@dangerous")
SHARED = ("changes",)   # the one key every writer adds to (a notification: readers read the records again)


def node_keys(topology: Topology, node_id: str, prefix: str) -> list[str]:
    """The key patterns node `node_id` writes."""
    own = [f"node:{node_id}", f"node:{node_id}:alive", f"stats:{node_id}", f"stats:{node_id}:*",
           f"parts:{node_id}", f"told:{node_id}", f"obeyed:{node_id}", f"hist:{node_id}", f"view:{node_id}.*",
           f"endpoint:node:{node_id}", f"adoption:{node_id}"]
    adopted = [f"adoption:{dead}" for dead in topology.nodes if may_adopt(topology, node_id, dead)]
    return [prefix + key for key in (*SHARED, *own, *adopted)]


def rules_by_user(topology: Topology, prefix: str = "hifi:") -> dict[str, tuple[str, ...]]:
    """Each MDR user (the placement service, the dashboard, every node's service) and its ACL rules."""
    read_all = f"%R~{prefix}*"
    found = {"placement": (*COMMANDS, f"~{prefix}*"),
             "dashboard": (*COMMANDS, read_all, f"~{prefix}endpoint:dashboard", f"~{prefix}changes")}
    for node_id in topology.nodes:
        found[node_service(node_id)] = (*COMMANDS, read_all, *(f"~{key}" for key in node_keys(topology, node_id,
                                                                                            prefix)))
    return found
