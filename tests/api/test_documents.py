"""The contracts on disk: the OpenAPI document covers exactly the routed API, and the
gRPC code is what the pinned generator makes of the .proto, byte for byte."""

from __future__ import annotations

import filecmp
import re
from pathlib import Path

from muster.api import codegen
from tests.api.conftest import Api

PUBLIC = {"/healthz", "/metrics", "/state", "/openapi.json"}
UI_FILES = {"/ui", "/ui/", "/ui/static"}  # the web UI's static files: no data, no token


async def test_openapi_document_matches_the_router(api_: Api) -> None:
    resp = await api_.http.get("/openapi.json")  # served without a token
    assert resp.status == 200
    doc = await resp.json()
    assert doc["openapi"].startswith("3.")
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    routed = {
        (r.resource.canonical, r.method)
        for r in api_.http.app.router.routes()
        if r.method != "HEAD"
        and r.resource is not None
        and r.resource.canonical not in PUBLIC | UI_FILES
    }
    assert documented == routed
    for path, ops in doc["paths"].items():
        for op in ops.values():
            params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert params == set(re.findall(r"{(\w+)}", path)), path
            assert "401" in op["responses"] and "403" in op["responses"]


def test_codegen_is_reproducible(tmp_path: Path) -> None:
    first = codegen.generate(tmp_path / "a")
    second = codegen.generate(tmp_path / "b")
    installed = codegen.ROOT / "libs" / "muster" / "api" / "v1"
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
        assert filecmp.cmp(a, installed / a.name, shallow=False), (
            f"{a.name} is stale: run `make setup` (python -m muster.api.codegen)"
        )
