"""Placeholder: filled in by the lab's issue."""
