"""Throw-away PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost, a client
certificate, and a second CA (whose certificates must be refused). Made with openssl.

    pki = make_pki(tmp_path)       # {"ca": …, "server.crt": …, "server.key": …, "client.crt": …, …}
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={name}")  # fmt: skip
    return key, crt


def _leaf(d: Path, name: str, ca: tuple[Path, Path], ext: str) -> None:
    key, csr, crt, extf = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt", d / f"{name}.ext"
    extf.write_text(ext)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[1]), "-CAkey", str(ca[0]), "-CAcreateserial",
             "-out", str(crt), "-days", "2", "-extfile", str(extf))  # fmt: skip


def make_pki(d: Path) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca")
    _leaf(d, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _leaf(d, "client", ca, "extendedKeyUsage=clientAuth\n")
    other = _ca(d, "other-ca")
    _leaf(d, "stranger", other, "extendedKeyUsage=clientAuth\n")
    return {p.name: str(p) for p in d.iterdir()}
