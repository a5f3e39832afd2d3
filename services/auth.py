"""Credentials on the gRPC plane: TLS on every server and channel, a bearer token on every call.

Servers (services.grpc_server) serve TLS with their service's certificate (services.certs) and
check each call's `authorization: Bearer <token>` against the MDR's token records before the
servicer runs: no or an unknown or expired token -> UNAUTHENTICATED; a caller without the role the
method needs (wire.identity.METHOD_ROLES) -> PERMISSION_DENIED naming the method and the role.
Every client channel of the system is opened here (`open_channel`), so none can be plaintext.

A token lookup is one Redis HGET (~0.1 ms on loopback) per call: no cache, so a removed token
stops working at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from mdr.repository import MDR, now_ms
from services import certs
from wire.errors import HiFiError
from wire.identity import Identity, TokenRecord, authorize, new_token, token_hash

AUTHORIZATION = "authorization"


class CredentialsError(HiFiError):
    """A service or client without the TLS material or token it needs."""


@dataclass(frozen=True)
class Security:
    """What a process presents and trusts: the certificates directory (its ca.pem, and for a
    server its certificate) and the bearer token its calls carry ("" for none)."""

    tls_dir: str
    token: str = ""

    @classmethod
    def from_env(cls, token: str = "") -> Security:
        """HIFI_TLS_DIR and HIFI_TOKEN (or `token`)."""
        tls_dir = os.environ.get("HIFI_TLS_DIR", "")
        if not tls_dir or not os.path.exists(os.path.join(tls_dir, "ca.pem")):
            raise CredentialsError("set HIFI_TLS_DIR to the deployment's certificates directory (made by "
                                   "`hifi certs DIR`; `hifi up` makes its own)"
                                   + (f": {tls_dir} has no ca.pem" if tls_dir else ""))
        return cls(tls_dir, token or os.environ.get("HIFI_TOKEN", ""))

    def with_token(self, token: str) -> Security:
        return Security(self.tls_dir, token)


def open_channel(address: str, security: Security) -> grpc.Channel:
    """A TLS channel to `address` trusting the deployment's CA, its calls carrying the token."""
    credentials = grpc.ssl_channel_credentials(root_certificates=certs.ca_bytes(security.tls_dir))
    if security.token:
        credentials = grpc.composite_channel_credentials(credentials,
                                                         grpc.access_token_call_credentials(security.token))
    return grpc.secure_channel(address, credentials)


def server_credentials(security: Security, service: str) -> grpc.ServerCredentials:
    key, chain = certs.server_files(security.tls_dir, service)
    return grpc.ssl_server_credentials([(key, chain)])


def mint_token(mdr: MDR, principal: str, roles: tuple[str, ...], expires_ms: int = 0, replace: bool = False) -> str:
    """A new token for `principal` (its record in the MDR; the token is returned once). `replace`:
    the principal's other tokens stop working (a service minting its own at start)."""
    if replace:
        mdr.drop_tokens(principal)
    token = new_token()
    mdr.put_token(token_hash(token), TokenRecord(principal, roles, now_ms(), expires_ms))
    return token


class Authenticator:
    """Who a token belongs to, from the MDR."""

    def __init__(self, mdr: MDR, clock: Callable[[], int] = now_ms) -> None:
        self.mdr = mdr
        self.clock = clock

    def identify(self, token: str) -> Identity | None:
        if not token:
            return None
        record = self.mdr.token(token_hash(token))
        if record is None or record.expired(self.clock()):
            return None
        return record.identity()

    def caller(self, context: grpc.ServicerContext) -> Identity | None:
        """The caller of a call (the interceptor has already refused one without a valid token)."""
        return self.identify(bearer(context.invocation_metadata()))


def bearer(metadata) -> str:
    for key, value in metadata or ():
        if key == AUTHORIZATION and isinstance(value, str) and value.startswith("Bearer "):
            return value.removeprefix("Bearer ").strip()
    return ""


# grpcio calls a behaviour marked `experimental_non_blocking` with a third argument (a callback that
# sends each response) and holds no worker thread while it streams: grpc_health's Watch is one.
def non_blocking(behaviour: Callable) -> bool:
    return bool(getattr(behaviour, "experimental_non_blocking", False))


class AuthInterceptor(grpc.ServerInterceptor):
    """Refuses a call before its servicer runs unless its token's roles allow the method.

    The token is checked as the call arrives, from its headers, before the server gives it a
    worker: a refused call is answered at once by a handler that reads no request (grpcio would
    otherwise hold a worker while the call's message is awaited, so calls that send headers and
    never a message could take every worker from the token holders)."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        try:
            identity = self.authenticator.identify(bearer(handler_call_details.invocation_metadata))
        except Exception:  # noqa: BLE001 - the MDR unreachable: the call is refused, the server goes on
            return _refusal(handler, grpc.StatusCode.UNAVAILABLE,
                            "the metadata repository cannot be reached to check the token: try again")
        allowed, why = authorize(method, identity)
        if allowed:
            return handler
        if identity is None:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                            "a valid bearer token is needed (hifi users add makes one; hifi up writes an admin "
                            "token to its run file)")
        return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, why)


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    """A handler answering `code` at once: a streaming-request one (its behaviour runs without
    waiting for a message), streaming its response if the method does."""

    def refuse(_requests, context):  # noqa: ANN001, ANN202 (grpcio's)
        context.abort(code, details)

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.stream_unary_rpc_method_handler(refuse)
