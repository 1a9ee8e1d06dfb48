"""Drain: fire every event-time window and timer of a stopped job, then stop."""
