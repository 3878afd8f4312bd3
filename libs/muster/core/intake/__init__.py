"""Intake's decisions, pure: what a submission, a batch or an apply appends, or why not."""
