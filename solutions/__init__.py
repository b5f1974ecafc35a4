"""Reference solutions. Each ``solutions/<lab package>/`` is a drop-in replacement for the lab's
editable starter files: copy its modules over the starter's and every graded test passes.
Instructor material: not part of the student release (``python -m grader release``)."""
