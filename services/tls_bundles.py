"""What TLS files each container of a compose deployment holds: the least it needs. Pure.

The `certs` service makes the CA and every certificate in a volume of its own (`hifi-ca`: the CA's
key never leaves it) and copies each container's bundle into that container's own volume
(`tls-<service>`), which the container mounts read-only and alone. So a container taken over
yields its own key and nothing that signs, serves or decrypts as another:

  placement     ca.pem, placement.pem, placement.key   serves gRPC; signs the parts it deploys
  node-<id>     ca.pem, placement.pem, <id>.pem, <id>.key
                                                       serves gRPC; checks placement's signatures
  dashboard     ca.pem, dashboard.pem, dashboard.key   serves HTTPS; calls placement
  agents        ca.pem                                 reaches the broker over TLS
  kafka         kafka.p12, kafka.p12.password          the broker's SASL_SSL listener (PKCS#12:
                                                       the image's form; its password beside it,
                                                       as the image requires)
  prometheus    ca.pem                                 reads the dashboard's HTTPS discovery
Whoever reaches the broker (every HiFi container) checks its certificate against ca.pem.
"""

from __future__ import annotations

from dataclasses import dataclass

from glue.topology import Topology
from services.deploy_names import node_service

HIFI_UID = 10001        # deploy/Dockerfile's user
KAFKA_UID = 1000        # the apache/kafka image's user
PROMETHEUS_UID = 65534  # the prom/prometheus image's user (nobody)
KEYSTORE = "kafka.p12"


@dataclass(frozen=True)
class Bundle:
    files: tuple[str, ...]   # names in the certs service's directory
    owner: int               # the uid the container runs as (a key is readable by it alone)

    @property
    def keys(self) -> tuple[str, ...]:
        """The files only their owner may read."""
        return tuple(f for f in self.files if not f.endswith(".pem"))


def bundles(topology: Topology) -> dict[str, Bundle]:
    """Each compose service that holds TLS files, and which.

    >>> from glue.topology import parse_topology
    >>> one = parse_topology("name: t\\nnodes:\\n  - {id: hq, tier: core}\\n", "t.yaml")
    >>> bundles(one)["node-hq"]
    Bundle(files=('ca.pem', 'placement.pem', 'hq.pem', 'hq.key'), owner=10001)
    >>> bundles(one)["kafka"].keys
    ('kafka.p12', 'kafka.p12.password')
    """
    found = {"placement": Bundle(("ca.pem", "placement.pem", "placement.key"), HIFI_UID)}
    for node in topology.nodes:
        found[node_service(node)] = Bundle(("ca.pem", "placement.pem", f"{node}.pem", f"{node}.key"), HIFI_UID)
    found["dashboard"] = Bundle(("ca.pem", "dashboard.pem", "dashboard.key"), HIFI_UID)
    found["agents"] = Bundle(("ca.pem",), HIFI_UID)
    found["spark-workers"] = Bundle(("ca.pem",), HIFI_UID)   # executors' Kafka clients check the broker with it
    found["kafka"] = Bundle((KEYSTORE, f"{KEYSTORE}.password"), KAFKA_UID)
    found["prometheus"] = Bundle(("ca.pem",), PROMETHEUS_UID)
    return found


def certified_services(topology: Topology) -> list[str]:
    """The services the CA issues a certificate to (each under its own name)."""
    return ["placement", *topology.nodes, "dashboard", "kafka"]


def volume(service: str) -> str:
    return f"tls-{service}"


def copy_script(topology: Topology, ca_dir: str, out_dir: str) -> list[str]:
    """The certs service's shell lines that put each bundle into `out_dir/<service>` (its volume):
    public files 0644, keys 0600, all owned by the container's user."""
    lines = []
    for service, bundle in bundles(topology).items():
        target = f"{out_dir}/{service}"
        lines.append(f"rm -f {target}/* && cp {' '.join(f'{ca_dir}/{f}' for f in bundle.files)} {target}/")
        lines.append(f"chown {bundle.owner} {' '.join(f'{target}/{f}' for f in bundle.files)}")
        public = [f for f in bundle.files if f not in bundle.keys]
        for mode, names in (("0644", public), ("0600", bundle.keys)):
            if names:
                lines.append(f"chmod {mode} {' '.join(f'{target}/{f}' for f in names)}")
    return lines
