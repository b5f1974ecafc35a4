"""Held-out tests of lab 03 (instructor-only: never in the student release)."""
