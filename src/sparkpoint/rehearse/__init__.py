"""Rehearsing a new version of a job against the old one's input and output."""
