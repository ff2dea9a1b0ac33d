"""TLS and mutual TLS: a throwaway CA and certificates made with `cryptography`."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engram_client.proto.engram.v1 import memory_service_pb2 as s
from engram_client.proto.engram.v1.memory_service_pb2_grpc import MemoryServiceStub
from engram_server.config import ConfigError, load_settings
from engram_server.testing import running_server
from tests.security.support import bearer

Pair = tuple[bytes, bytes]  # (certificate PEM, key PEM)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(
    subject: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer[0].subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    signer = issuer[1] if issuer else key
    return builder.sign(signer, hashes.SHA256()), key


def _pem(pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey]) -> Pair:
    cert, key = pair
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | bytes]:
    root = tmp_path_factory.mktemp("pki")
    ca = _issue("engram test CA", None, ca=True, server=False)
    other_ca = _issue("someone else's CA", None, ca=True, server=False)
    server_cert, server_key = _pem(_issue("localhost", ca, ca=False, server=True))
    client_cert, client_key = _pem(_issue("agent-1", ca, ca=False, server=False))
    rogue_cert, rogue_key = _pem(_issue("rogue", other_ca, ca=False, server=False))
    files = {"ca": _pem(ca)[0], "server_cert": server_cert, "server_key": server_key}
    out: dict[str, Path | bytes] = {}
    for name, data in files.items():
        path = root / f"{name}.pem"
        path.write_bytes(data)
        out[name] = path
    out.update(
        ca_pem=_pem(ca)[0],
        client_cert=client_cert,
        client_key=client_key,
        rogue_cert=rogue_cert,
        rogue_key=rogue_key,
    )
    return out


async def _list(address: str, credentials: grpc.ChannelCredentials, key: str | None = None) -> None:
    async with grpc.aio.secure_channel(address, credentials) as channel:
        await MemoryServiceStub(channel).ListCollections(
            s.ListCollectionsRequest(), metadata=bearer(key), timeout=20
        )


async def test_tls(tmp_path: Path, pki: dict[str, Path | bytes]) -> None:
    async with running_server(
        tmp_path / "d", tls_cert_file=pki["server_cert"], tls_key_file=pki["server_key"], api_key="k"
    ) as server:
        await _list(server.address, grpc.ssl_channel_credentials(root_certificates=pki["ca_pem"]), "k")  # type: ignore[arg-type]
        # Plaintext to a TLS port fails; so does a client that does not trust the CA.
        async with grpc.aio.insecure_channel(server.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await MemoryServiceStub(channel).ListCollections(
                    s.ListCollectionsRequest(), metadata=bearer("k"), timeout=5
                )
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _list(
                server.address, grpc.ssl_channel_credentials(root_certificates=pki["rogue_cert"]), "k"
            )  # type: ignore[arg-type]
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls(tmp_path: Path, pki: dict[str, Path | bytes]) -> None:
    async with running_server(
        tmp_path / "d",
        tls_cert_file=pki["server_cert"],
        tls_key_file=pki["server_key"],
        tls_client_ca_file=pki["ca"],
        api_key="k",
    ) as server:
        good = grpc.ssl_channel_credentials(
            root_certificates=pki["ca_pem"],
            private_key=pki["client_key"],
            certificate_chain=pki["client_cert"],  # type: ignore[arg-type]
        )
        await _list(server.address, good, "k")
        for credentials in (
            grpc.ssl_channel_credentials(root_certificates=pki["ca_pem"]),  # type: ignore[arg-type]  # no client cert
            grpc.ssl_channel_credentials(
                root_certificates=pki["ca_pem"],
                private_key=pki["rogue_key"],
                certificate_chain=pki["rogue_cert"],  # type: ignore[arg-type]
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _list(server.address, credentials, "k")
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        # mTLS does not replace the API key: the key still decides the grants.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _list(server.address, good, None)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_tls_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        load_settings({"ENGRAM_TLS_CERT_FILE": "/x.pem"})
    with pytest.raises(ConfigError):
        load_settings({"ENGRAM_TLS_CLIENT_CA_FILE": "/ca.pem"})
    with pytest.raises(ConfigError):
        load_settings({"ENGRAM_AUTH": "maybe"})


async def test_engram_client_over_mutual_tls(tmp_path: Path, pki: dict[str, Path | bytes]) -> None:
    """The typed client package with its own TLS options, against the TLS server."""
    from engram_client import AsyncEngramClient, UnavailableError  # noqa: PLC0415

    async with running_server(
        tmp_path / "d",
        tls_cert_file=pki["server_cert"],
        tls_key_file=pki["server_key"],
        tls_client_ca_file=pki["ca"],
        api_key="k",
    ) as server:
        async with AsyncEngramClient(
            server.address,
            api_key="k",
            root_certificates=pki["ca_pem"],  # type: ignore[arg-type]
            certificate_chain=pki["client_cert"],  # type: ignore[arg-type]
            private_key=pki["client_key"],  # type: ignore[arg-type]
            timeout=20,
        ) as client:
            added = await client.add("Over mutual TLS.")
            assert added.memory.content == "Over mutual TLS."
        async with AsyncEngramClient(
            server.address,
            api_key="k",
            root_certificates=pki["ca_pem"],
            timeout=5,  # type: ignore[arg-type]
        ) as client:
            with pytest.raises(UnavailableError):  # no client certificate: the handshake fails
                await client.list_collections()
