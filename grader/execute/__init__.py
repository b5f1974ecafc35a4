"""One lab run: the only place the grader starts a student's code.

- :mod:`~grader.execute.sandbox`: the folder a submission is graded in (pristine course + editable files);
- :mod:`~grader.execute.isolation`: what a graded process may see and reach (bubblewrap, or nothing);
- :mod:`~grader.execute.seccomp`: the system calls refused in the sandbox (the kernel keyring's), as a BPF program;
- :mod:`~grader.execute.limits`: time and size limits, derived from the reference's recorded times;
- :mod:`~grader.execute.command`: the pytest command line and environment of a graded process;
- :mod:`~grader.execute.probe`: the pytest plugin inside the graded process (events, canaries, alarms);
- :mod:`~grader.execute.supervisor`: runs the process, owns its results channel, kills what overruns;
- :mod:`~grader.execute.collect`: the pristine rubric, collected by pytest and cached by content hash;
- :mod:`~grader.execute.preflight`: can this interpreter grade at all (before anyone is graded).

Imports: :mod:`grader.course`, :mod:`grader.evidence`. :mod:`~grader.execute.probe` imports only the
standard library, pytest and :mod:`grader.evidence.events`: it runs beside the student's code.
"""
