"""The course autograder: run, score, batch, report, release."""
