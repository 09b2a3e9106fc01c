"""Certificates the benchmark and the security tests make for themselves with openssl: a CA,
a broker's certificate for 127.0.0.1 and localhost, and client certificates, as Kafka's PEM
keystores take them (a PKCS#8 key and its certificate chain in one file). Never in git."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Identity:
    """A key and its certificate, signed by the test CA."""

    key: Path  # PKCS#8 PEM
    cert: Path
    keystore: Path  # the key and the certificate in one file (ssl.keystore.type=PEM)

    def inline_key(self) -> str:
        return self.key.read_text()

    def inline_chain(self) -> str:
        return self.cert.read_text()


@dataclass(frozen=True)
class CertAuthority:
    folder: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, folder: Path, name: str = "kbroker-test-ca") -> CertAuthority:
        folder.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", "ca.key", "-out", "ca.pem", cwd=folder,
        )  # fmt: skip
        return cls(folder, folder / "ca.pem", folder / "ca.key")

    def issue(
        self,
        name: str,
        subject: str,
        san: str = "IP:127.0.0.1,DNS:localhost",
        key_password: str | None = None,
    ) -> Identity:
        """A certificate for ``subject`` (/CN=.../OU=...) with ``san`` alt names; its key
        encrypted with ``key_password`` when given."""
        f = self.folder
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
            "-keyout", f"{name}.rsa", "-out", f"{name}.csr", cwd=f,
        )  # fmt: skip
        (f / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
            cwd=f,
        )  # fmt: skip
        pkcs8 = ["pkcs8", "-topk8", "-in", f"{name}.rsa", "-out", f"{name}.key"]
        if key_password is None:
            _openssl(*pkcs8, "-nocrypt", cwd=f)
        else:
            # PKCS#12's 3DES scheme: Java 17, and so Kafka's PEM keystore, cannot read a
            # PBES2 (AES) encrypted key; OpenSSL reads both.
            _openssl(*pkcs8, "-v1", "PBE-SHA1-3DES", "-passout", f"pass:{key_password}", cwd=f)
        keystore = f / f"{name}-keystore.pem"
        keystore.write_text((f / f"{name}.key").read_text() + (f / f"{name}.pem").read_text())
        return Identity(f / f"{name}.key", f / f"{name}.pem", keystore)
