"""grading/kernels.py overrides private methods of jupyter_client and nbclient: each is held here to the parameters it
was written against, so that a release that changes one fails here, by name, instead of grading quietly wrong."""

from __future__ import annotations

import inspect

import pytest

from grading.kernels import OVERRIDDEN


@pytest.mark.parametrize(("owner", "name"), sorted(OVERRIDDEN, key=lambda k: (k[0].__name__, k[1])), ids=str)
def test_an_overridden_private_method_still_takes_what_the_adapter_passes(owner, name):
    method = getattr(owner, name, None)
    assert method is not None, (
        f"{owner.__module__}.{owner.__name__}.{name} is gone: grading/kernels.py needs a look"
    )
    parameters = tuple(inspect.signature(method).parameters)
    assert parameters == OVERRIDDEN[(owner, name)], (
        f"{owner.__name__}.{name}{parameters}: written against {OVERRIDDEN[(owner, name)]}; see grading/kernels.py"
    )


def test_the_preprocessors_override_only_what_the_adapter_lists():
    """SandboxedExecute's own private overrides are among those the adapter pins."""
    from grading.autograde import SandboxedExecute

    overridden = {
        name
        for name, value in vars(SandboxedExecute).items()
        if name.startswith("_async") and callable(value)
    }
    pinned = {name for (_owner, name) in OVERRIDDEN}
    assert overridden <= pinned, overridden - pinned
