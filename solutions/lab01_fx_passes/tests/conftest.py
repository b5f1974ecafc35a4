"""Prints the zoo's table at the end of a run that ran zoo cells."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter) -> None:
    from .test_zoo import RESULTS

    if not RESULTS:
        return
    terminalreporter.write_sep("=", f"lab01 zoo: {len(RESULTS)} cells ran")
    terminalreporter.write_line(
        f"{'model':22s} {'dialect':17s} {'BN folded':>10s} {'conv NHWC':>10s} {'max |err|':>10s} {'s':>6s}  result"
    )
    for row in RESULTS:
        folded = f"{row['batch_norms'] - row['left']}/{row['batch_norms']}"
        convs = f"{row['channels_last']}/{row['convs']}"
        terminalreporter.write_line(
            f"{row['model']:22s} {row['dialect']:17s} {folded:>10s} {convs:>10s} {row['max_abs_error']:>10.2e} "
            f"{row['seconds']:>6.1f}  {'ok' if row['ok'] else 'FAILED'}"
        )
