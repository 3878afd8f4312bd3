"""Who is calling (tokens), what it may do (policy), how fast it may submit (rate); pure."""
