"""The ``muster`` command line."""
