"""Start-up check that every watched topic and dead-letter topic exists.

Topic auto-creation would turn a typo into an empty topic that a watcher waits
on forever, and a missing dead-letter topic would hold every rejected message;
so the triggerer refuses to start and names every missing topic at once.

The same metadata request is the first contact with the brokers, so it is also where a
secured connection's mistakes show. librdkafka reports them through its error callback
(and then keeps retrying until the timeout): the probe serves that callback while it
waits and stops at the first authentication or TLS failure with one error naming the
connection and the setting to fix:

* ``_AUTHENTICATION`` (SASL): wrong ``sasl.username``/``sasl.password``, or a
  ``sasl.mechanisms`` the broker does not offer: :class:`BrokerAuthenticationError`;
* ``_SSL`` with "certificate verify failed": librdkafka does not say why, so the probe
  repeats the TLS handshake with Python's :mod:`ssl` and the same CA to read OpenSSL's
  verify result: a certificate not signed by the configured CA, or not naming the
  host, is a :class:`BrokerAuthenticationError`; an expired (or not yet valid) one a
  :class:`BrokerCertificateExpiredError`;
* any other ``_SSL`` failure (a client certificate the broker wants, a plaintext
  listener): :class:`BrokerAuthenticationError` with librdkafka's reason.

A configuration problem (exit 2) is one only this connection's settings can fix; an
expired broker certificate is fixed on the broker, after which a retry succeeds (exit
1, like a broker that does not answer).
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sharedstream.kafka.connections import ConnectionConfigError, client_config
from sharedstream.kafka.logs import LIBRDKAFKA_LOGGER

log = logging.getLogger(__name__)


class BrokerUnreachableError(RuntimeError):
    """The brokers of a connection did not answer a metadata request in time: a runtime
    failure (exit 1), which a supervisor may retry, not a configuration error."""


class BrokerAuthenticationError(ConnectionConfigError):
    """The broker and this connection did not accept each other: SASL credentials or
    mechanism refused, or the broker's certificate not trusted by ``ssl.ca.location`` or
    not naming the host. Only the connection's settings can fix it (exit 2)."""


class BrokerCertificateExpiredError(BrokerUnreachableError):
    """The broker's TLS certificate is outside its validity window: fixed on the broker
    (or the clock), after which a retry succeeds, so a runtime failure (exit 1)."""


# OpenSSL's X509_V_ERR_* verify results (x509_vfy.h), as Python's ssl reports them.
_EXPIRED, _NOT_YET_VALID = 10, 9
_UNTRUSTED = frozenset({2, 18, 19, 20, 21})  # no issuer found, self-signed, unknown CA
_NAME_MISMATCH = frozenset({62, 64})         # hostname, IP address
_BROKER_NAME = re.compile(r"\b(?:sasl_)?ssl://(\[[^\]]+\]|[^/:\s]+):(\d+)/", re.I)
_PREFIX = re.compile(r"^\s*\w+://\S+?:\s+")  # sasl_ssl://127.0.0.1:9093/bootstrap:
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+\)")


class _QuietLogger:
    """librdkafka's lines during the probe: DEBUG only (its errors arrive as one message
    below; at the default level, the ``error:`` line is all an operator sees)."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        LIBRDKAFKA_LOGGER.log(logging.DEBUG, msg, *args)


def missing_topics(connection_id: str, config: Mapping[str, Any], topics: Iterable[str],
                   timeout: float = 15.0) -> list[str]:
    """The subset of ``topics`` the cluster does not have, sorted.

    A topic missing from an answer is asked for again (backing off to once a second)
    until ``timeout`` seconds from the start: after a cluster restart a broker can answer
    before its metadata lists every topic, and that must not read as a typo. Only what
    is still missing at the deadline is returned; a complete answer returns at once.

    Raises :class:`ConnectionConfigError` for a setting librdkafka refuses (an unknown
    key, a bad value), :class:`BrokerAuthenticationError` or
    :class:`BrokerCertificateExpiredError` as soon as librdkafka reports such a failure
    (see the module doc), and :class:`BrokerUnreachableError` naming the bootstrap
    servers when none answers within ``timeout`` seconds.
    """
    wanted = set(topics)
    errors: list[KafkaError] = []
    settings = client_config(config)
    settings.update(error_cb=errors.append, logger=_QuietLogger())
    try:
        admin = AdminClient(settings)
    except KafkaException as exc:
        raise ConnectionConfigError(
            f"connection {connection_id!r}: {exc.args[0].str() if exc.args else exc} "
            f"(fix it in [connections.{connection_id}] or the environment)") from None
    deadline = time.monotonic() + timeout
    wait = 0.1  # short requests at first, so a refusal is seen within a fraction of a second
    asked_again = False
    missing: list[str] | None = None  # what the last answer lacked; None: none came
    while True:
        try:
            existing = admin.list_topics(timeout=max(min(wait, deadline - time.monotonic()),
                                                     0.01)).topics
        except KafkaException as exc:
            failure = exc
        else:
            missing = sorted(wanted - set(existing))
            if not missing or time.monotonic() >= deadline:
                return missing
            # A broker back from a restart may answer before its metadata holds every
            # topic: only a topic still missing at the deadline is missing.
            if not asked_again:
                log.info("topics not in the metadata of connection %r yet: %s; asking again "
                         "until [triggerer] broker_timeout (%gs)", connection_id,
                         ", ".join(missing), timeout)
                asked_again = True
            time.sleep(min(wait, max(deadline - time.monotonic(), 0.0)))
            wait = min(wait * 2, 1.0)
            continue
        admin.poll(0)  # serves error_cb
        for error in errors:
            refused = refusal(connection_id, config, error)
            if refused is not None:
                raise refused from None
        if time.monotonic() >= deadline:
            if missing is not None:
                # The cluster answered: a request asking again near the deadline (given
                # what was left of it) timing out does not make it unreachable.
                return missing
            reason = failure.args[0].str() if failure.args else str(failure)
            last = next((e.str() for e in reversed(errors)
                         if e.code() != KafkaError._ALL_BROKERS_DOWN), None)
            if last:
                reason += f"; last: {_AFTER.sub('', last)}"
            raise BrokerUnreachableError(
                f"connection {connection_id!r}: no broker of {config.get('bootstrap.servers')} "
                f"answered within {timeout:g}s ({reason}); check bootstrap.servers and the "
                "network ([triggerer] broker_timeout waits longer)") from None
        wait = min(wait * 2, 2.0)


def refusal(connection_id: str, config: Mapping[str, Any], error: KafkaError
            ) -> Exception | None:
    """The start-up error for an authentication or TLS failure librdkafka reported, or
    None for anything else (a broker that is down is waited for)."""
    text = _AFTER.sub("", error.str())
    where = f"connection {connection_id!r}"
    if error.code() == KafkaError._AUTHENTICATION:
        mechanism = config.get("sasl.mechanisms") or config.get("sasl.mechanism") or "GSSAPI"
        if "mechanism" in text.lower() and "unsupported" in text.lower():
            return BrokerAuthenticationError(
                f"{where}: SASL: the broker does not offer sasl.mechanisms={mechanism} "
                f"({_reason(text)}): set sasl.mechanisms to one it offers")
        user = config.get("sasl.username")
        who = f" as sasl.username {user!r}" if user else ""
        if "invalid credentials" in text.lower() or "authentication failed" in text.lower():
            return BrokerAuthenticationError(
                f"{where}: SASL authentication failed{who} ({mechanism}): check "
                "sasl.username/sasl.password")
        return BrokerAuthenticationError(
            f"{where}: SASL authentication failed{who} ({_reason(text)}): check the sasl.* "
            "settings")
    if error.code() != KafkaError._SSL:
        return None
    if "certificate verify failed" in text.lower():
        return _verify_failure(connection_id, config, text)
    if "client ssl authentication might be required" in text.lower():
        return BrokerAuthenticationError(
            f"{where}: TLS: the broker wants a client certificate: set "
            "ssl.certificate.location and ssl.key.location")
    return BrokerAuthenticationError(
        f"{where}: TLS handshake with the broker failed ({_reason(text)}): check "
        "security.protocol (SSL/SASL_SSL only for a TLS listener) and the ssl.* settings")


def _reason(text: str) -> str:
    """librdkafka's message without its ``sasl_ssl://host:port/id:`` prefix."""
    return _PREFIX.sub("", text, count=1).strip() or text


def _ca_source(config: Mapping[str, Any]) -> tuple[str, str]:
    """What the client trusts: (a name for it, where it is)."""
    if config.get("ssl.ca.pem"):
        return "ssl.ca.pem's CA", "ssl.ca.pem is set"
    location = config.get("ssl.ca.location")
    if location and location != "probe":
        return "ssl.ca.location's CA", f"ssl.ca.location is {location}"
    return "a CA this host trusts", "ssl.ca.location is not set"


def _verify_failure(connection_id: str, config: Mapping[str, Any], text: str) -> Exception:
    """librdkafka says only "certificate verify failed"; OpenSSL, asked again, says why."""
    where = f"connection {connection_id!r}: TLS:"
    address = _address(config, text)
    host, port = address or ("", 0)
    result = _verify_result(config, host, port) if address else None
    broker = f"broker {host}:{port}" if address else "broker"
    trusted, detail = _ca_source(config)
    if result is None:
        return BrokerAuthenticationError(
            f"{where} the broker's certificate could not be verified with {trusted} "
            f"({broker}; {detail}): check ssl.ca.location, and that the certificate is "
            "current")
    code, message = result[0], result[1].rstrip(".")
    if code == _EXPIRED:
        return BrokerCertificateExpiredError(
            f"{where} the broker's certificate has expired ({broker}; OpenSSL: {message}): "
            "the broker's certificate must be renewed (or this host's clock is wrong)")
    if code == _NOT_YET_VALID:
        return BrokerCertificateExpiredError(
            f"{where} the broker's certificate is not valid yet ({broker}; OpenSSL: "
            f"{message}): check this host's and the broker's clocks")
    if code in _NAME_MISMATCH:
        return BrokerAuthenticationError(
            f"{where} the broker's certificate does not name {host} ({broker}; OpenSSL: "
            f"{message}): use a name it was issued for in bootstrap.servers")
    if code in _UNTRUSTED:
        return BrokerAuthenticationError(
            f"{where} the broker's certificate is not signed by {trusted} ({broker}; "
            f"{detail}; OpenSSL: {message}): set ssl.ca.location to the CA that signed it")
    return BrokerAuthenticationError(
        f"{where} the broker's certificate was refused ({broker}; {detail}; OpenSSL: "
        f"{message}): check ssl.ca.location")


def _address(config: Mapping[str, Any], text: str) -> tuple[str, int] | None:
    """The broker librdkafka was talking to, else the first bootstrap server."""
    match = _BROKER_NAME.search(text)
    if match is None:
        first = str(config.get("bootstrap.servers") or "").split(",")[0].strip()
        match = re.fullmatch(r"(?:\w+://)?(\[[^\]]+\]|[^:/\s]+):(\d+)", first)
    if match is None:
        return None
    return match.group(1).strip("[]"), int(match.group(2))


def _verify_result(config: Mapping[str, Any], host: str, port: int
                   ) -> tuple[int, str] | None:
    """OpenSSL's verify result for the broker at ``host:port`` with the connection's CA
    settings: ``(X509_V_ERR code, message)``, or None when it cannot tell (no answer,
    or the handshake passes here)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = str(config.get(
        "ssl.endpoint.identification.algorithm", "https")).lower() == "https"
    try:
        pem, location = config.get("ssl.ca.pem"), config.get("ssl.ca.location")
        if pem:
            context.load_verify_locations(cadata=str(pem))
        elif location and location != "probe":
            if Path(str(location)).is_dir():
                context.load_verify_locations(capath=str(location))
            else:
                context.load_verify_locations(cafile=str(location))
        else:
            context.load_default_certs()
        with socket.create_connection((host, port), timeout=5.0) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as exc:
        return exc.verify_code, exc.verify_message
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return None
