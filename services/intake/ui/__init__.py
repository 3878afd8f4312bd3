"""The web UI intake serves at ``/ui/``: pages over intake's read model, now or at any
past position of the log."""
