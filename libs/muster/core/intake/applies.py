"""Reading an apply's text into manifests, purely: the documents within bounds, a kubectl
List unwrapped, every object parsed, or one refusal. Runs wherever the shell puts it (a
worker process for large bodies, so one tenant's big file never holds up another's
requests)."""

from __future__ import annotations

from typing import Any

from muster.core.intake.refusal import Refusal, invalid
from muster.core.model import manifests
from muster.core.model.documents import DocumentError, load_documents
from muster.core.model.fields import InvalidInput

Read = tuple[manifests.Manifests, list[Any]]  # the manifests, their ProvisioningRequests


def read(text: str | bytes) -> Read | Refusal:
    try:
        docs = [d for d in load_documents(text) if d is not None]
    except DocumentError as exc:
        return Refusal("MalformedYAML", str(exc))
    if len(docs) == 1 and isinstance(docs[0], dict) and isinstance(docs[0].get("items"), list):
        docs = docs[0]["items"]  # a kubectl List
    if not docs:
        return Refusal("InvalidField", "no manifests given")
    if not manifests.is_manifests(docs):
        return Refusal("InvalidField", "not Kubernetes manifests: no document has a kind")
    try:
        m = manifests.read(docs)
        return m, m.provisioning_requests()
    except InvalidInput as exc:
        return invalid(exc)
