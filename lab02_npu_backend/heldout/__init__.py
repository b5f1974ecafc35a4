"""Held-out tests of lab 02 (instructor-only: never in the student release)."""
