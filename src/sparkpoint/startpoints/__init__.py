"""Startpoints: out-of-band start positions per source, applied once at a job's next start."""
