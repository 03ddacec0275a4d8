"""kanal.v1 holds the contract alone (the .proto files, their stubs, the vectors and the wire helpers), and
every public name the docs show still imports after the layout change moved modules out of it."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "proto" / "kanal" / "v1"
HAND_WRITTEN = sorted(p for p in CONTRACT.glob("*.py") if "_pb2" not in p.name)

# What a contract module may import: the contract, protobuf, gRPC's client-side types (the error trailer
# reads a failed call) and the parts of the standard library that do no I/O of their own.
ALLOWED_IMPORTS = {
    "__future__", "base64", "collections", "dataclasses", "enum", "functools", "gzip", "importlib",
    "itertools", "re", "struct", "typing", "warnings", "zlib", "grpc", "google", "kanal", "crc32c",
    "cramjam", "mmh3",
}
FORBIDDEN_CALLS = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "basicConfig", "start_http_server",
    "ssl_channel_credentials", "ssl_server_credentials", "add_secure_port",
}


def _imports(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", HAND_WRITTEN, ids=lambda p: p.name)
def test_a_contract_module_does_no_tls_http_logging_or_file_reading(path):
    tree = ast.parse(path.read_text())
    imports = _imports(tree)
    outside = sorted(m for m in imports if m.split(".")[0] not in ALLOWED_IMPORTS)
    assert not outside, f"{path.name} imports {outside}"
    foreign = sorted(m for m in imports if m.startswith("kanal.") and not m.startswith("kanal.v1"))
    assert not foreign, f"{path.name} imports {foreign}: kanal.v1 imports nothing else of kanal"
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree) if isinstance(node, ast.Call)
    }
    assert not calls & FORBIDDEN_CALLS, f"{path.name} calls {sorted(calls & FORBIDDEN_CALLS)}"


@pytest.mark.parametrize("module", ["kanal.v1.batch", "kanal.v1.error", "kanal.v1.codecs",
                                    "kanal.v1.partitioning", "kanal.v1.topic_name", "kanal.v1.client_id"])
def test_importing_a_wire_helper_loads_no_tls_http_or_server_runtime(module):
    probe = (f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    heavy = [m for m in loaded if m.split(".")[0] in ("cryptography", "prometheus_client", "ssl", "http")
             or m.startswith("grpc.aio") or m in ("grpc", "logging.config")]
    assert not heavy, f"import {module} loads {heavy}"


def test_the_moved_client_security_name_still_imports_from_its_old_home():
    from kanal.clients import ClientSecurity
    from kanal.security.channel_security import ClientSecurity as moved

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from kanal.v1.channel_security import ClientSecurity as old
    assert old is moved and ClientSecurity is moved
    assert any(issubclass(w.category, DeprecationWarning) and "kanal.security" in str(w.message)
               for w in caught)
    import kanal.v1.channel_security as alias
    with pytest.raises(AttributeError):
        alias.no_such_name  # noqa: B018 - the attribute access is the test


# -- every kanal name the docs show resolves -------------------------------------------------------------

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("*/README.md")),
        *sorted(REPO.glob("*/*/README.md")), *sorted(REPO.glob("proto/kanal/*/README.md"))]
PYTHON_PACKAGES = {"v1", "net", "security", "server", "commands", "metadata", "raft", "broker", "clients",
                   "spark", "deploy"}
DOTTED = re.compile(r"\bkanal(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FROM_IMPORT = re.compile(r"from (kanal(?:\.\w+)*) import \(?([\w, ]+)")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _proto_name(name: str) -> bool:
    """A name of the wire schema (kanal.v1.Broker, kanal.v1.ErrorCode), not of Python."""
    from google.protobuf import descriptor_pool

    from kanal.v1 import admin_pb2, broker_pb2, controller_pb2, groups_pb2  # noqa: F401 - fill the pool

    pool = descriptor_pool.Default()
    for find in (pool.FindMessageTypeByName, pool.FindServiceByName, pool.FindEnumTypeByName):
        try:
            find(name)
            return True
        except KeyError:
            continue
    return False


def _doc_names() -> list[tuple[str, str]]:
    names = set()
    for doc in DOCS:
        text = doc.read_text()
        for match in DOTTED.finditer(text):
            name = match.group(0)
            if name.split(".")[1] in PYTHON_PACKAGES and len(name.split(".")) > 2:
                names.add((name, str(doc.relative_to(REPO))))
        for match in FROM_IMPORT.finditer(text):
            for imported in match.group(2).split(","):
                if imported.strip():
                    names.add((f"{match.group(1)}.{imported.strip()}", str(doc.relative_to(REPO))))
    return sorted(names)


def test_every_kanal_name_the_docs_show_resolves():
    names = _doc_names()
    assert len(names) > 50, "the docs' kanal names were not found"
    broken = [f"{name} ({doc})" for name, doc in names if not _resolves(name) and not _proto_name(name)]
    assert not broken, "names in the docs that no longer import: " + ", ".join(broken)
