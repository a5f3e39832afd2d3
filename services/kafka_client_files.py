"""Client settings files for the embedded broker's users: what kcat and Kafka's own tools need.

`hifi up` writes them under HIFI_HOME/kafka (0600, the directory 0700): `<user>.conf` for
librdkafka's tools (`kcat -F`), `<user>.properties` for Kafka's (`--consumer.config`,
`--command-config`), `ca.pem`, the broker's CA, and `lib/librdkafka.so.1` (docs/other-tools.md).

Debian 12's kcat links librdkafka 2.0.2, whose SCRAM no Kafka 4 broker accepts (librdkafka before
2.6.1 sends the client's nonce twice in its final message; Kafka 4 checks it as RFC 5802 says):
`LD_LIBRARY_PATH=<dir>/lib kcat ...` runs it on the librdkafka confluent-kafka ships (2.16).
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Mapping

from services.kafka_acls import MECHANISM


def librdkafka_settings(bootstrap: str, user: str, password: str, ca_file: str) -> str:
    """A kcat / librdkafka configuration file.

    >>> print(librdkafka_settings("127.0.0.1:9092", "analyst", "pw", "/h/ca.pem"), end="")
    bootstrap.servers=127.0.0.1:9092
    security.protocol=SASL_SSL
    sasl.mechanisms=SCRAM-SHA-512
    sasl.username=analyst
    sasl.password=pw
    ssl.ca.location=/h/ca.pem
    """
    return (f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanisms={MECHANISM}\n"
            f"sasl.username={user}\nsasl.password={password}\nssl.ca.location={ca_file}\n")


def java_settings(user: str, password: str, ca_file: str) -> str:
    """A Kafka (Java) client configuration file: the same user over SASL_SSL, the CA as a PEM truststore."""
    return ("security.protocol=SASL_SSL\n"
            f"sasl.mechanism={MECHANISM}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={ca_file}\n")


def _private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def link_librdkafka(directory: str) -> str:
    """`directory`/lib/librdkafka.so.1, a link to confluent-kafka's own librdkafka; the lib directory."""
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    lib = os.path.join(directory, "lib")
    os.makedirs(lib, exist_ok=True)
    if found:
        link = os.path.join(lib, "librdkafka.so.1")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(found[0], link)
    return lib


def write_client_files(directory: str, bootstrap: str, ca_file: str, passwords: Mapping[str, str]) -> list[str]:
    """Each user's two files and the CA in `directory`; the paths of the librdkafka files."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    ca = os.path.join(directory, "ca.pem")
    shutil.copyfile(ca_file, ca)
    written = []
    for user, password in passwords.items():
        path = os.path.join(directory, f"{user}.conf")
        _private(path, librdkafka_settings(bootstrap, user, password, ca))
        _private(os.path.join(directory, f"{user}.properties"), java_settings(user, password, ca))
        written.append(path)
    link_librdkafka(directory)
    return written
