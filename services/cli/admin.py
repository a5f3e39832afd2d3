"""Setting a deployment up: `hifi deploy` (the compose file), `hifi certs` (the TLS material)
and `hifi users` (principals and their tokens): their parsers, help and work."""

from __future__ import annotations

import argparse
import os
import sys
import time

from glue.topology import load_topology
from services.cli.common import CLIError, connect_mdr, format_option, print_listing, progress, say
from services.paths import DEFAULT_TOPOLOGY

# what each command does, in prose: its --help description and its part of docs/cli.md
DESCRIPTIONS: dict[str, str] = {
    'deploy': (
        '`compose`: render the docker compose deployment of a topology (see *Deploying with docker compose*);'
        " `docker-compose.yml` in this repository is the default topology's; `secrets`: a `.env` of new "
        "random passwords for every secret that topology's compose file needs (Redis, Grafana, each Kafka "
        'user), written readable by you only; refuses to overwrite an existing file (new secrets would lock a'
        ' running deployment out)'
    ),
    'certs': (
        "make a deployment's CA in `DIR` (once: an existing one is kept) and a TLS certificate per "
        "`--service` (default one shared `hifi` certificate; a node serves its id's, the placement service "
        "`placement`'s, and either falls back to `hifi`'s), valid for the service name, each `--host` and "
        '`localhost`/`127.0.0.1`; keys EC P-256, written 0600, certificates valid 825 days. Running it again '
        're-issues the service certificates with the same CA: a rotation (restart the services). `--keystore '
        "NAME` also writes `NAME.p12`, a PKCS#12 keystore of that service's key and certificate for a JVM "
        "(compose's Kafka broker), locked with a random password in `NAME.p12.password`"
    ),
    'users': (
        "users' bearer tokens, in the MDR: `add` prints a new token for principal `NAME` once (roles `user`, "
        "the default, `operator`, `service`, `admin`; `--expires` e.g. `'30 days'`, default never), `remove` "
        'revokes every token of `NAME` at once, `list` shows principal, roles, created, expires and the first'
        " 12 hex digits of each token's SHA-256 (tokens themselves are never stored). Whoever may write the "
        'MDR administers the deployment'
    ),
}


def add_deploy(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="render deployment files for a topology")
    deploy.add_argument("what", choices=["compose", "secrets"],
                        help="compose: a docker-compose.yml (Apache Kafka, Redis, every node, placement, dashboard, "
                             "agents, Prometheus, Grafana); secrets: a .env of new random passwords for every secret "
                             "that compose file needs (Redis, Grafana, each Kafka user), written 0600")
    deploy.add_argument("--topology", default=DEFAULT_TOPOLOGY, help="topology YAML (default: supply-chain)")
    deploy.add_argument("--output", default=None, help="write here instead of to standard output")
    deploy.add_argument("--spark-cluster", action="store_true",
                        help="the nodes on a Spark standalone cluster of the deployment's own (a master, two "
                             "workers; each node's application holds one core), not each in Spark's local mode; "
                             "with secrets: HIFI_SPARK_SECRET too")
    deploy.set_defaults(func=cmd_deploy)


def cmd_deploy(args: argparse.Namespace) -> int:
    import secrets

    from services.compose import render_compose, secret_variables

    topology = load_topology(args.topology)
    if args.what == "secrets":
        text = ("# secrets of the compose deployment of topology " + repr(topology.name) + ": keep this file private\n"
                + "".join(f"{name}={secrets.token_urlsafe(24)}\n"
                          for name in secret_variables(topology, args.spark_cluster)))
    else:
        text = render_compose(topology, args.topology, args.spark_cluster)
    if args.output:
        if args.what == "secrets" and os.path.exists(args.output):
            raise CLIError(f"{args.output} exists: new secrets would lock the running deployment out of its "
                           f"Redis and broker; remove it first to start afresh")
        mode = 0o600 if args.what == "secrets" else 0o644
        with open(os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as fh:
            fh.write(text)
        progress(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def add_certs(sub: argparse._SubParsersAction) -> None:
    certs = sub.add_parser("certs", help="make a deployment's CA (once) and TLS certificates for its services")
    certs.add_argument("directory", help="where (ca.pem, ca.key, <service>.pem/.key); give services HIFI_TLS_DIR")
    certs.add_argument("--service", action="append", default=[],
                       help="a certificate for this service (repeat; default: one shared 'hifi' certificate). "
                            "A node uses its id's, the placement service 'placement''s; SERVICE:HOST[,HOST] "
                            "makes it valid for those names too, and for no other service's")
    certs.add_argument("--host", action="append", default=[],
                       help="a name or address the certificates are valid for besides the service name, "
                            "localhost and 127.0.0.1 (repeat)")
    certs.add_argument("--deployment", default="hifi", help="the CA's name (default hifi)")
    certs.add_argument("--keystore", action="append", default=[], metavar="SERVICE",
                       help="also write SERVICE's key and certificate as a PKCS#12 keystore, SERVICE.p12, locked "
                            "with a random password in SERVICE.p12.password (a JVM service: the Kafka broker)")
    certs.set_defaults(func=cmd_certs)


def cmd_certs(args: argparse.Namespace) -> int:
    from services.certs import expiry, make_certificates, write_keystore

    services = args.service or ["hifi"]
    try:
        written = make_certificates(args.directory, services, args.host, args.deployment)
        keystores = [write_keystore(args.directory, service) for service in args.keystore]
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot make certificates in {args.directory}: {exc}") from None
    for path in written:
        say(f"{path}  valid until {expiry(path):%Y-%m-%d}")
    for path in keystores:
        say(f"{path}  (its password in {path}.password)")
    progress(f"give services HIFI_TLS_DIR={os.path.abspath(args.directory)}; clients need only its ca.pem "
              f"(keep ca.key off the hosts)")
    return 0


def add_users(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="users' tokens: add (prints a new token once), remove, list")
    users.add_argument("action", choices=["add", "remove", "list"],
                       help="add: a new token for NAME (printed once); remove: revoke all of NAME's; list: every token")
    users.add_argument("name", nargs="?", default="", help="the principal (add, remove)")
    users.add_argument("--role", action="append", choices=["user", "operator", "service", "admin"], default=[],
                       help="a role of the new token (repeat; default user): user submits and reads its own "
                            "queries; operator sees all queries and the nodes; service is the placement's; "
                            "admin everything")
    users.add_argument("--expires", default="",
                       help="the token expires after this long, e.g. '30 days' or '12 hours' (default: never)")
    format_option(users)   # list's
    users.set_defaults(func=cmd_users)


def cmd_users(args: argparse.Namespace) -> int:
    """Users and their tokens, in the MDR (whoever may write the MDR administers the deployment)."""
    from services.auth import mint_token
    from wire.identity import IdentityError, checked_principal, checked_roles
    from wire.windows import WindowError, duration_ms

    mdr = connect_mdr()
    if args.action == "list":
        from services.listing import when

        rows = sorted(([r.principal, ",".join(r.roles), when(r.created_ms), when(r.expires_ms), digest[:12]]
                       for digest, r in mdr.tokens().items()), key=lambda row: (row[0], row[4]))
        print_listing(args, ["principal", "roles", "created", "expires", "token sha256"], rows)   # expires -: never
        return 0
    if not args.name:
        raise CLIError(f"hifi users {args.action} needs the principal's name")
    try:
        name = checked_principal(args.name)
        if args.action == "remove":
            removed = mdr.drop_tokens(name)
            if not removed:
                raise CLIError(f"{name} has no tokens")
            say(f"removed {name}'s {removed} token(s): they stop working at once")
            return 0
        roles = checked_roles(args.role or ["user"])
        expires_ms = int(time.time() * 1000) + duration_ms(args.expires) if args.expires else 0
    except (IdentityError, WindowError) as exc:
        raise CLIError(str(exc)) from None
    token = mint_token(mdr, name, roles, expires_ms)
    progress(f"a token for {name} ({', '.join(roles)}){'' if not expires_ms else ', expiring ' + args.expires}: "
              f"it is shown once; give it as HIFI_TOKEN or log in to the dashboard with it")
    say(token)
    return 0
