"""What both Kubernetes backends (provisioner, node agent) need: an API client from the
settings, and backoff between retries."""

from __future__ import annotations

import asyncio
import random

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from muster.runtime.settings import Settings


async def api_client(settings: Settings) -> ApiClient:
    """``MUSTER_KUBE_API_URL`` if set; else the pod's service account, else ``~/.kube/config``
    (or ``$KUBECONFIG``)."""
    if settings.kube_api_url:
        return ApiClient(Configuration(host=settings.kube_api_url))
    configuration = Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        await kube_config.load_kube_config(client_configuration=configuration)
    return ApiClient(configuration)


class Backoff:
    """Exponential backoff (each wait jittered between half and all of it), reset by progress."""

    def __init__(self, first: float = 0.2, cap: float = 30.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    def reset(self) -> None:
        self.delay = self.first

    async def sleep(self) -> None:
        await asyncio.sleep(random.uniform(self.delay / 2, self.delay))
        self.delay = min(self.cap, self.delay * 2)
