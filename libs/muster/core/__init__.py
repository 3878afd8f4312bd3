"""The functional core: pure, deterministic, no I/O, no clock, no asyncio."""
