"""deploy/: what can be checked without Docker.

No Docker engine, Qdrant server or Envoy binary runs here, so these tests check that the files
parse, name pinned images and real settings, fit together (ports, service names, health service,
secrets), keep no secrets, and that the Engram replicas' configuration, taken from the compose
file itself, is valid and reaches ``create_collection`` on the qdrant-client code path.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from qdrant_client import AsyncQdrantClient

from engram_client import EngramClient
from engram_server.adapters.storage.qdrant import QdrantStore
from engram_server.app import SERVICE_NAME, build_store
from engram_server.config import SETTINGS_DOC, ConfigError, load_settings
from engram_server.domain.model import CollectionSpec

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KNOWN_VARS = {var for _, var, _ in SETTINGS_DOC}
# What a real key or hash looks like (engram hash-key --generate), so none slips into git.
SECRET_PATTERNS = [
    re.compile(r"engram_[A-Za-z0-9_-]{20,}"),
    re.compile(r"sha256:[0-9a-f]{16,}:[0-9a-f]{32,}"),
    re.compile(r"scrypt:\d+:\d+:\d+:[0-9a-f]{8,}:[0-9a-f]{16,}"),
    re.compile(r"\b[0-9a-f]{32,}\b"),
]


def deploy_files() -> list[Path]:
    """The files under deploy/ that belong in git (not a local deploy/.env or deploy/secrets/*)."""
    return [
        p
        for p in sorted(DEPLOY.rglob("*"))
        if p.is_file()
        and p != DEPLOY / ".env"
        and not (p.parent == DEPLOY / "secrets" and p.name != ".gitignore")
    ]


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, Any]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


def qdrant_services() -> dict[str, Any]:
    return {n: svc for n, svc in services().items() if svc["image"].startswith("qdrant/qdrant:")}


def engram_services() -> dict[str, Any]:
    return {n: svc for n, svc in services().items() if svc.get("image", "").startswith("engram:")}


def interpolated(env: dict[str, Any]) -> dict[str, str]:
    """The environment as compose would pass it, with ${VAR:?...} filled by a placeholder."""
    return {k: re.sub(r"\$\{[A-Z_]+(:\?[^}]*)?\}", "placeholder", str(v)) for k, v in env.items()}


def test_compose_parses_and_has_the_cluster_the_replicas_and_a_balancer() -> None:
    assert len(qdrant_services()) == 3
    assert len(engram_services()) >= 2
    assert "balancer" in services()


def test_every_image_is_pinned_to_a_version() -> None:
    images = [svc["image"] for svc in services().values()]
    images += re.findall(r"^FROM\s+(\S+)", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    for image in images:
        _name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{image} is not pinned"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+[\w.-]*", tag), f"{image}: tag is not an explicit version"


def test_qdrant_image_matches_the_pinned_client() -> None:
    """qdrant-client and the server are meant to share major.minor."""
    client = metadata.version("qdrant-client")
    for svc in qdrant_services().values():
        server = svc["image"].partition(":v")[2]
        assert server.split(".")[:2] == client.split(".")[:2], (server, client)


def test_qdrant_nodes_form_one_cluster_with_their_own_volumes() -> None:
    nodes = qdrant_services()
    uris: dict[str, str] = {}
    bootstraps: dict[str, str | None] = {}
    for name, svc in nodes.items():
        env = svc["environment"]
        assert str(env["QDRANT__CLUSTER__ENABLED"]).lower() == "true"
        assert str(env["QDRANT__CLUSTER__P2P__PORT"]) == "6335"
        assert "QDRANT__SERVICE__API_KEY" in env
        args = svc["command"]
        uris[name] = args[args.index("--uri") + 1]
        bootstraps[name] = args[args.index("--bootstrap") + 1] if "--bootstrap" in args else None
        assert uris[name] == f"http://{name}:6335"
        (volume,) = svc["volumes"]
        source, target = volume.split(":")[:2]
        assert target == "/qdrant/storage" and source in compose()["volumes"]
    # one seed, every other node bootstraps from a node of this cluster
    assert list(bootstraps.values()).count(None) == 1
    assert all(b in uris.values() for b in bootstraps.values() if b is not None)
    assert len({svc["volumes"][0] for svc in nodes.values()}) == len(nodes)


def test_every_engram_variable_in_deploy_files_is_a_real_setting() -> None:
    named: set[str] = set()
    for path in deploy_files():
        named |= set(re.findall(r"\bENGRAM_[A-Z0-9_]+\b", path.read_text()))
    assert named, "no ENGRAM_* variables found"
    # server settings, or the variables the client and the MCP shim read (the docs mention some)
    client_side = {
        var
        for src in (ROOT / "engram_client" / "src", ROOT / "mcp_shim" / "src")
        for path in src.rglob("*.py")
        for var in re.findall(r"\bENGRAM_[A-Z0-9_]+\b", path.read_text())
    }
    unknown = named - KNOWN_VARS - client_side
    assert not unknown, f"unknown settings: {sorted(unknown)}"
    # what the server reads (compose, Dockerfile) must be a server setting
    for path in (DEPLOY / "compose.yaml", DEPLOY / "Dockerfile"):
        served = set(re.findall(r"\bENGRAM_[A-Z0-9_]+\b", path.read_text()))
        assert served <= KNOWN_VARS, f"{path.name}: {sorted(served - KNOWN_VARS)}"


def test_replica_configuration_is_valid_and_auth_is_on() -> None:
    for name, svc in engram_services().items():
        env = interpolated(svc["environment"])
        settings = load_settings(env)  # the server's own start-up validation
        assert settings.host == "0.0.0.0" and settings.auth == "on"
        assert settings.api_key is None, f"{name}: use the hashed auth file, not a plain key"
        assert str(settings.auth_file).startswith("/run/secrets/")
        assert settings.auth_file is not None
        assert settings.auth_file.name in svc["secrets"]
        url = settings.qdrant_url or ""
        host = re.fullmatch(r"http://([\w-]+):6333", url)
        assert host and host[1] in qdrant_services(), url
        assert settings.qdrant_api_key == "placeholder"  # from deploy/.env, never inline
        rf, wcf = settings.qdrant_replication_factor, settings.qdrant_write_consistency_factor
        assert rf is not None and wcf is not None and 1 <= wcf <= rf <= len(qdrant_services())
    # the replicas spread over different Qdrant nodes
    urls = [svc["environment"]["ENGRAM_QDRANT_URL"] for svc in engram_services().values()]
    assert len(set(urls)) == len(urls)


@pytest.fixture
def create_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []
    real: Callable[..., Awaitable[bool]] = AsyncQdrantClient.create_collection

    async def spy(self: AsyncQdrantClient, collection_name: str, **kwargs: Any) -> bool:
        calls.append({"collection_name": collection_name, **kwargs})
        return await real(self, collection_name, **kwargs)

    monkeypatch.setattr(AsyncQdrantClient, "create_collection", spy)
    yield calls


async def test_compose_cluster_settings_reach_create_collection(create_calls: list[dict[str, Any]]) -> None:
    """The replicas' environment, with the Qdrant URL swapped for qdrant-client's local mode."""
    env = interpolated(next(iter(engram_services().values()))["environment"])
    settings = load_settings({**env, "ENGRAM_QDRANT_URL": ":memory:"})
    store = build_store(settings)
    assert isinstance(store, QdrantStore)
    await store.open()
    try:
        await store.create_collection(
            CollectionSpec(name="default", embedding_model="test/random", dimension=8, created_at=1.0)
        )
        await store.put_state("reflection.default", {"runs": []})
    finally:
        await store.close()
    assert [c["collection_name"] for c in create_calls] == ["default", "_engram_state"]
    for call in create_calls:
        assert call["shard_number"] == int(env["ENGRAM_QDRANT_SHARD_NUMBER"])
        assert call["replication_factor"] == int(env["ENGRAM_QDRANT_REPLICATION_FACTOR"])
        assert call["write_consistency_factor"] == int(env["ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR"])


# ----------------------------------------------------------------------------------- Dockerfile


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_copy_sources_exist_and_pass_the_dockerignore() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources = []
    for word, rest in dockerfile_instructions():
        if word == "COPY" and not rest.startswith("--from"):
            *srcs, _dest = shlex.split(rest)
            sources += srcs
    assert sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        assert src.rstrip("/") in allowed, f"COPY {src}: excluded by Dockerfile.dockerignore"


def test_dockerfile_installs_like_the_makefile_and_runs_the_cli_as_non_root() -> None:
    instructions = dockerfile_instructions()
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert 'pip install --no-cache-dir ./engram_client ".[rerank]"' in runs
    makefile = (ROOT / "Makefile").read_text()
    assert "-e ./engram_client" in makefile  # the same two distributions, client first
    assert "rerank]" in makefile  # and the same extra: the image reranks as `make install` does
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entrypoint = next(rest for word, rest in instructions if word == "ENTRYPOINT")
    cmd = next(rest for word, rest in instructions if word == "CMD")
    assert yaml.safe_load(entrypoint) == ["engram"] and "engram" in scripts
    assert yaml.safe_load(cmd) == ["serve"]
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and not users[-1].startswith(("root", "0"))
    health = next(rest for word, rest in instructions if word == "HEALTHCHECK")
    assert "/opt/engram/healthcheck.py" in health
    assert any(
        word == "COPY" and "deploy/healthcheck.py /opt/engram/healthcheck.py" in rest
        for word, rest in instructions
    )


async def test_healthcheck_script_against_a_live_server(engram_server: str) -> None:
    health = load_healthcheck()
    assert await asyncio.to_thread(health.main, ["healthcheck.py", engram_server]) == 0


def test_healthcheck_script_fails_when_nothing_listens() -> None:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert load_healthcheck().main(["healthcheck.py", f"127.0.0.1:{port}"]) == 1


def load_healthcheck() -> Any:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("deploy_healthcheck", DEPLOY / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.SERVICE == SERVICE_NAME
    return module


# ---------------------------------------------------------------------------------------- envoy


def envoy() -> dict[str, Any]:
    loaded = yaml.safe_load((DEPLOY / "envoy.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_envoy_balances_grpc_by_collection_over_the_replicas() -> None:
    """Structure only: no Envoy binary here to run `envoy --mode validate`."""
    (cluster,) = envoy()["static_resources"]["clusters"]
    assert cluster["lb_policy"] == "RING_HASH"
    options = cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]
    assert "http2_protocol_options" in options["explicit_http_config"]  # gRPC upstreams need HTTP/2
    (check,) = cluster["health_checks"]
    assert check["grpc_health_check"]["service_name"] == SERVICE_NAME
    endpoints = {
        (
            e["endpoint"]["address"]["socket_address"]["address"],
            e["endpoint"]["address"]["socket_address"]["port_value"],
        )
        for group in cluster["load_assignment"]["endpoints"]
        for e in group["lb_endpoints"]
    }
    expected = {(name, int(svc["environment"]["ENGRAM_PORT"])) for name, svc in engram_services().items()}
    assert endpoints == expected

    (listener,) = envoy()["static_resources"]["listeners"]
    (hcm,) = listener["filter_chains"][0]["filters"]
    (vhost,) = hcm["typed_config"]["route_config"]["virtual_hosts"]
    (route,) = vhost["routes"]
    assert route["route"]["cluster"] == cluster["name"]
    assert route["route"]["hash_policy"] == [{"header": {"header_name": "x-engram-collection"}}]
    port = listener["address"]["socket_address"]["port_value"]
    assert any(p.endswith(f":{port}") for p in services()["balancer"]["ports"])
    mounted = services()["balancer"]["volumes"][0].split(":")
    assert mounted[0] == "./envoy.yaml" and (DEPLOY / mounted[0]).exists()
    for typed in re.findall(r'"@type": (\S+)', (DEPLOY / "envoy.yaml").read_text()):
        assert typed.startswith("type.googleapis.com/envoy."), typed


def test_the_client_can_send_the_routing_header_on_every_call() -> None:
    client = EngramClient("127.0.0.1:1", metadata=[("x-engram-collection", "alice")])
    try:
        assert ("x-engram-collection", "alice") in client._metadata
    finally:
        client.close()


# -------------------------------------------------------------------------------------- secrets


def test_examples_hold_placeholders_not_secrets() -> None:
    env = dict(
        line.split("=", 1)
        for line in (DEPLOY / "env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert env == {"QDRANT_API_KEY": "REPLACE-ME"}
    for path in deploy_files():
        text = path.read_text()
        for pattern in SECRET_PATTERNS:
            assert not pattern.search(text), f"{path}: looks like a secret ({pattern.pattern})"


def test_the_auth_example_parses_and_fails_closed(tmp_path: Path) -> None:
    from engram_server.api.auth import build_auth_interceptor  # noqa: PLC0415

    example = DEPLOY / "auth.example.toml"
    assert tomllib.loads(example.read_text())["principals"]
    settings = load_settings(
        {"ENGRAM_HOST": "0.0.0.0", "ENGRAM_AUTH": "on", "ENGRAM_AUTH_FILE": str(example)}
    )
    with pytest.raises(ConfigError, match="hash line"):
        build_auth_interceptor(settings)


def test_real_secrets_are_ignored_by_git() -> None:
    assert (DEPLOY / ".gitignore").read_text().split() == [".env"]
    assert (DEPLOY / "secrets" / ".gitignore").read_text().splitlines()[-2:] == ["*", "!.gitignore"]
    assert compose()["secrets"]["engram_auth"]["file"] == "./secrets/auth.toml"


def test_the_compose_cluster_is_the_one_the_cluster_tests_run() -> None:
    """tests/cluster (make test-cluster) kills a node of a real 3-node cluster under these settings."""
    from tests.cluster import test_qdrant_cluster as tested  # noqa: PLC0415

    assert len(qdrant_services()) == 3
    for svc in engram_services().values():
        env = interpolated(svc["environment"])
        assert (
            int(env["ENGRAM_QDRANT_SHARD_NUMBER"]),
            int(env["ENGRAM_QDRANT_REPLICATION_FACTOR"]),
            int(env["ENGRAM_QDRANT_WRITE_CONSISTENCY_FACTOR"]),
        ) == (tested.SHARDS, tested.REPLICATION, tested.WRITE_CONSISTENCY)
        assert env.get("ENGRAM_QDRANT_WRITE_LEASE", "true") == "true"  # the gate holds across replicas
