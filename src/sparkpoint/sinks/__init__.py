"""File sinks: their logs, history, ownership and rewind."""
