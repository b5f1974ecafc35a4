"""Top-level pytest configuration: every lab and the grader share one plugin."""

pytest_plugins = ["labkit.pytest_plugin"]
