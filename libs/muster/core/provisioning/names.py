"""How Kueue names what its ProvisioningRequest admission check creates, and what it asks
of the pods that consume a request (``podSetUpdates``): shared by the queue, which shows
them in a workload's status, and the Kubernetes backend, which creates the objects."""

from __future__ import annotations

import hashlib
import re

TEMPLATE_PREFIX = "ppt"
# Kueue's limitObjectName: 253 is the longest object name; keep room for "-" and a 5-char hash.
MAX_NAME = 253
HASH_LENGTH = 5
# The annotations Kueue puts on a pod set's pods once its request is Provisioned: the
# autoscaler then lets the pods use the request's booked nodes.
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


def dns1123(text: str) -> str:
    """``text`` as a DNS-1123 subdomain: lower case, runs of other characters become ``-``,
    no leading or trailing punctuation (``x`` if nothing is left)."""
    out = _NOT_DNS.sub("-", text.lower())
    out = re.sub(r"\.{2,}", ".", out)
    out = re.sub(r"-*\.-*", ".", out)
    return out.strip(".-") or "x"


def limit_name(full: str) -> str:
    """Kueue's ``limitObjectName``: names over 247 characters keep their first 247 (less
    trailing ``.`` or ``-``) and end in ``-`` and 5 hex digits of the full name's SHA-1 (so
    distinct long names stay distinct, and the result is at most 253)."""
    if len(full) <= MAX_NAME - HASH_LENGTH - 1:
        return full
    digest = hashlib.sha1(full.encode()).hexdigest()[:HASH_LENGTH]
    prefix = full[: MAX_NAME - HASH_LENGTH - 1].rstrip(".-")
    return f"{prefix}-{digest}"


def request_name(workload: str, check: str, attempt: int) -> str:
    """``<workload-name>-<check>-<attempt>``, as Kueue names a workload's ProvisioningRequest."""
    return limit_name(dns1123(f"{workload}-{check}-{attempt}"))


def pod_template_name(request: str, pod_set: str) -> str:
    """``ppt-<request name>-<pod set>``, as Kueue names the PodTemplates it creates."""
    return limit_name(dns1123(f"{TEMPLATE_PREFIX}-{request}-{pod_set}"))


def consume_annotations(request: str, provisioning_class: str) -> dict[str, str]:
    """The annotations a pod consuming ProvisioningRequest ``request`` carries."""
    return {CONSUME_ANNOTATION: request, CLASS_ANNOTATION: provisioning_class}
