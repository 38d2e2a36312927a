"""Test certificates made with the ``openssl`` command: a CA, and server certificates it signs.

A test that talks TLS to a local broker makes its own CA (never a system one), issues
the broker's certificate for ``127.0.0.1``/``localhost`` (librdkafka checks the name:
``ssl.endpoint.identification.algorithm`` is ``https`` by default) and hands the
client the CA's certificate as ``ssl.ca.location``. A second CA gives a certificate
the client does not trust; ``expired=True`` a certificate whose validity ended
yesterday (issued with ``openssl ca -startdate/-enddate``: no clock faking).

Every certificate comes with a PEM *keystore* for Kafka (``ssl.keystore.type=PEM``):
the unencrypted PKCS#8 private key followed by the certificate chain, up to the CA.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._process import ServiceError, run_checked

_CA_CONFIG = """[req]
distinguished_name = dn
prompt = no
x509_extensions = ca_extensions

[dn]
CN = {name}

[ca_extensions]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash

[ca]
default_ca = test_ca

[test_ca]
database = {dir}/index.txt
new_certs_dir = {dir}/issued
serial = {dir}/serial
certificate = {dir}/ca.crt
private_key = {dir}/ca.key
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
email_in_dn = no

[anything]
commonName = supplied
"""

_SERVER_EXTENSIONS = """[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = {names}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise ServiceError("openssl is needed for the test certificates "
                           "(apt-get install -y openssl)")
    return path


def _asn1_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y%m%d%H%M%SZ")


@dataclass(frozen=True)
class ServerCertificate:
    """A server certificate: ``key``, ``cert`` (PEM) and ``keystore`` (key + chain)."""

    key: Path
    cert: Path
    keystore: Path


class CertificateAuthority:
    """A throwaway CA in ``directory`` (created): ``cert`` is what clients trust."""

    def __init__(self, directory: Path, name: str = "sharedstream test CA",
                 days: int = 30) -> None:
        self.directory = directory
        self.name = name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "issued").mkdir(exist_ok=True)
        (directory / "index.txt").write_text("")
        (directory / "serial").write_text("1000\n")
        self.config = directory / "ca.cnf"
        self.config.write_text(_CA_CONFIG.format(name=name, dir=directory))
        self.key = directory / "ca.key"
        self.cert = directory / "ca.crt"
        run_checked([_openssl(), "req", "-x509", "-config", str(self.config),
                     "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key),
                     "-out", str(self.cert), "-days", str(days)])

    def issue(self, name: str, *, hosts: Sequence[str] = ("127.0.0.1", "localhost"),
              expired: bool = False, days: int = 30) -> ServerCertificate:
        """A certificate for ``hosts`` (IP addresses or DNS names), files ``<name>.*`` in
        the CA's directory; ``expired``: valid from two days ago until yesterday."""
        openssl, base = _openssl(), self.directory / name
        key, csr, cert = base.with_suffix(".key"), base.with_suffix(".csr"), \
            base.with_suffix(".crt")
        run_checked([openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes",
                     "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={hosts[0]}"])
        names = ",".join(("IP:" if h.replace(".", "").isdigit() or ":" in h else "DNS:") + h
                         for h in hosts)
        extensions = base.with_suffix(".ext")
        extensions.write_text(_SERVER_EXTENSIONS.format(names=names))
        now = dt.datetime.now(dt.UTC)
        if expired:
            start, end = now - dt.timedelta(days=2), now - dt.timedelta(days=1)
        else:
            start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
        run_checked([openssl, "ca", "-batch", "-notext", "-config", str(self.config),
                     "-extfile", str(extensions), "-extensions", "server",
                     "-startdate", _asn1_time(start), "-enddate", _asn1_time(end),
                     "-in", str(csr), "-out", str(cert)])
        keystore = base.with_suffix(".keystore.pem")
        keystore.write_text(key.read_text() + cert.read_text() + self.cert.read_text())
        keystore.chmod(0o600)
        return ServerCertificate(key=key, cert=cert, keystore=keystore)
