"""The course's own tools: build the learner lessons and the Korean edition, execute the solutions, make the checks'
stored data and the tiny base model, build the learner release, benchmark grading, profile CI.

Each module has a ``main(argv)``; ``python scripts/<module>.py`` and the ``memlab-*`` commands of pyproject.toml run
it. The GPU-evidence tooling is in ``coursetools/gpu`` (its README.md). None of this is in the learner release.
"""
