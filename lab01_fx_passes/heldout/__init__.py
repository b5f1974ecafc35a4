"""Held-out tests of lab 01 (instructor-only: never in the student release)."""
