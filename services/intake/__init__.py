"""intake: the HTTP API batch platforms submit to."""
