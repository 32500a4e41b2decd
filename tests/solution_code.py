"""The tests' door to the solution notebooks' own answers (coursetools/solution_code.py): `solution(slug, *names)`."""

from coursetools.solution_code import solution

__all__ = ["solution"]
