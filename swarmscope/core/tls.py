"""TLS for the probe fleet's gRPC: server credentials for the controller, channel credentials
for the probe, from PEM files (a cert-manager Secret mounts ``tls.crt``, ``tls.key``, ``ca.crt``).

    files = TLSFiles(cert="tls.crt", key="tls.key", ca="ca.crt")
    server.add_secure_port(bind, server_credentials(files))     # ca set: client certs required (mTLS)
    grpc.secure_channel(addr, channel_credentials(files))      # ca: trust; cert+key: mTLS client

Caveat: the controller's certificate must name the address probes dial (in the chart, the
Service's DNS name ``<release>-swarmscope-controller.<namespace>.svc``); ``server_name``
overrides the name checked, for tests that dial 127.0.0.1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import grpc

from swarmscope.core.errors import ConfigError, Problem, SetupError


@dataclass(frozen=True)
class TLSFiles:
    cert: str = ""  # our certificate chain (PEM)
    key: str = ""  # its private key (PEM)
    ca: str = ""  # the CA that signs the peer's certificate (PEM)
    server_name: str = ""  # client only: the name to check in the server's certificate

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.key or self.ca)


def client_files(args: Any) -> TLSFiles:
    """A client's TLS settings: each ``--tls-*`` flag, else its ``SWARMSCOPE_TLS_*`` variable."""

    def get(flag: str) -> str:
        v = getattr(args, "tls_" + flag.replace("-", "_"), None)
        return v or os.environ.get("SWARMSCOPE_TLS_" + flag.replace("-", "_").upper(), "")

    files = TLSFiles(cert=get("cert"), key=get("key"), ca=get("ca"), server_name=get("server-name"))
    if (files.cert or files.key) and not files.ca:
        raise ConfigError(
            [Problem("--tls-ca", "tls_ca", "a client certificate needs --tls-ca (the controller's CA)")]
        )
    return files


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise SetupError(f"cannot read TLS {what} {path}: {e.strerror}") from e


def server_credentials(files: TLSFiles) -> grpc.ServerCredentials:
    """The controller side: its cert and key; with ``ca``, only clients it signed get in."""
    if not (files.cert and files.key):
        raise SetupError("TLS for the probe fleet needs both a certificate and its key (tls_cert, tls_key)")
    pair = [(_read(files.key, "key"), _read(files.cert, "certificate"))]
    ca = _read(files.ca, "CA") if files.ca else None
    return grpc.ssl_server_credentials(pair, root_certificates=ca, require_client_auth=ca is not None)


def channel_credentials(files: TLSFiles) -> grpc.ChannelCredentials:
    """The probe side: trust ``ca`` (else the system roots); present cert+key when given (mTLS)."""
    if bool(files.cert) != bool(files.key):
        raise SetupError("a probe's TLS client certificate needs its key too (--tls-cert with --tls-key)")
    return grpc.ssl_channel_credentials(
        root_certificates=_read(files.ca, "CA") if files.ca else None,
        private_key=_read(files.key, "key") if files.key else None,
        certificate_chain=_read(files.cert, "certificate") if files.cert else None,
    )


def channel_options(files: TLSFiles) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", files.server_name)] if files.server_name else []
