"""Starting a HiFi gRPC server: the service over TLS with every call's token checked (services.auth),
plus health checking and reflection (open: they say only whether it is up and what its API is)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mdr.repository import MDR
from protos import hifi_pb2
from services.auth import Authenticator, AuthInterceptor, Security, server_credentials

RPCS_PER_WORKER = 8


def start_server(add_servicer: Callable[[grpc.Server], None], service: str, listen: str, security: Security,
                 mdr: MDR, certificate: str, workers: int = 8,
                 interceptors: Sequence[grpc.ServerInterceptor] = ()) -> tuple[grpc.Server, str]:
    """Serve `service` ("Node", "Placement") on `listen` ("host:port", port 0 for any free one)
    with the TLS `certificate` of `security`'s directory (a node's id, "placement"), tokens checked
    against `mdr`; returns the server and the address it listens on. `interceptors`: e.g. the
    service's metrics (they count refused calls too: authentication runs inside them)."""
    # calls beyond RPCS_PER_WORKER a worker are refused (RESOURCE_EXHAUSTED), not queued without end;
    # health's Watch and the result streams within their quotas (services.quotas) fit
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"grpc-{service}"),
                         interceptors=[*interceptors, AuthInterceptor(Authenticator(mdr))],
                         maximum_concurrent_rpcs=workers * RPCS_PER_WORKER)
    add_servicer(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    full_name = hifi_pb2.DESCRIPTOR.services_by_name[service].full_name
    reflection.enable_server_reflection((full_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = server.add_secure_port(listen, server_credentials(security, certificate))
    server.start()
    for name in ("", full_name):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, f"{listen.rsplit(':', 1)[0]}:{port}"
