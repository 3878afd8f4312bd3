"""The four muster services: thin asyncio shells around the deciders in libs/."""
