"""A lab 1 submission that overfits the visible tests, built from the reference by two shortcuts.

Real overfitting looks like this: code that works on the models the tests use and nowhere else.

- ``conv_bn.py`` folds a Conv+BN pair only when its channel count is one the visible tests use
  (2, 4, 6, 8, and ResNet-50's 64 to 2048): MobileNetV2 or a 5-channel convolution keep their BNs;
- ``dce.py`` knows only the impure operations the visible tests plant (``add_``, ``relu_``, ``mul_``, ``sub_``,
  ``rand_like``/``randn_like``, ``bernoulli``, ``dropout``): an unused ``x.masked_fill_(...)`` or
  ``clamp_`` is deleted.

It earns every visible point and loses held-out points. :func:`materialize` writes it as a student's
copy of the course (the reference's editable files with the shortcuts applied); each edit must find
its text in the reference, so a changed reference breaks this fixture loudly instead of silently.
"""

from __future__ import annotations

from pathlib import Path

from grader.course.labs import Course, make_reference_submission

PACKAGE = "lab01_fx_passes"
VISIBLE_CHANNELS = "{2, 4, 6, 8, 64, 128, 256, 512, 1024, 2048}"
#: file -> [(text in the reference, its replacement)]
EDITS: dict[str, list[tuple[str, str]]] = {
    "conv_bn.py": [
        ("@dataclass\nclass _Fold:\n", f"VISIBLE_CHANNELS = {VISIBLE_CHANNELS}\n\n\n@dataclass\nclass _Fold:\n"),
        (
            "        if conv_module.out_channels != norm.num_features:\n",
            "        if conv_module.out_channels not in VISIBLE_CHANNELS:\n            return None\n"
            "        if conv_module.out_channels != norm.num_features:\n",
        ),
        (
            "        if mean is None or var is None or conv_w.shape[0] != mean.shape[0]:\n",
            "        if conv_w.shape[0] not in VISIBLE_CHANNELS:\n            return None\n"
            "        if mean is None or var is None or conv_w.shape[0] != mean.shape[0]:\n",
        ),
    ],
    "dce.py": [
        ("    if op.in_place:\n", "    if op.in_place and op.name in {'add', 'relu', 'mul', 'sub'}:\n"),
        ("    if op.name in RANDOM_OPS:\n", "    if op.name in {'rand_like', 'randn_like', 'bernoulli', 'dropout'}:\n"),
    ],
}


def materialize(course: Course, dest: Path) -> Path:
    """Write the overfitting submission into ``dest`` (the reference's editable files, edited).

    Raises:
        AssertionError: when an edit's text is not in the reference any more.
    """
    make_reference_submission(course, dest)
    for name, edits in EDITS.items():
        path = dest / PACKAGE / name
        text = path.read_text(encoding="utf-8")
        for old, new in edits:
            assert text.count(old) == 1, f"overfit fixture: {name} no longer contains {old!r} exactly once"
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
    return dest
