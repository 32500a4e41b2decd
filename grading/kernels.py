"""The one adapter over private methods of jupyter_client, nbclient and nbconvert that the grader overrides.

Written for jupyter_client 8.10, nbclient 0.11 and nbconvert 7.17; tests/grader/test_kernel_adapter.py holds each to the
signature it was written against, so that a release that changes one fails there, by name, and not as a grading
run that quietly misbehaves. What each override is for:

- `SandboxedKernelManager._async_launch_kernel` (jupyter_client's `KernelManager`): the kernel's command runs inside
  the sandbox (grading/isolation.py) with the sandbox's environment, and a watch follows its processes;
- `SandboxedKernelManager._async_signal_kernel`: an interrupt goes to the processes inside the sandbox only
  (jupyter_client signals the kernel's process group, bubblewrap's own processes included: the kernel ended instead
  of the cell);
- `restart_client` (nbclient's `NotebookClient.__init__`, nbconvert's `ExecutePreprocessor._check_assign_resources`):
  nbgrader's Execute is a NotebookClient set up once by nbconvert; running a notebook again from the top (after a
  cell had to be stopped) needs a fresh one, killed rather than asked to exit once its last cell has run;
- `_async_handle_timeout` (nbclient's `NotebookClient`): overridden by grading.autograde.SandboxedExecute, which
  interrupts the cell and stops the kernel only when the cell does not stop.
"""

from __future__ import annotations

import os
import signal
import uuid

from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbconvert.preprocessors import ExecutePreprocessor

from grading import isolation

#: the private methods overridden here and in grading.autograde, and the parameters they were written against
OVERRIDDEN = {
    (AsyncKernelManager, "_async_launch_kernel"): ("self", "kernel_cmd", "kw"),
    (AsyncKernelManager, "_async_signal_kernel"): ("self", "signum"),
    (NotebookClient, "__init__"): ("self", "nb", "km", "kw"),
    (ExecutePreprocessor, "_check_assign_resources"): ("self", "resources"),
    (NotebookClient, "_async_handle_timeout"): ("self", "timeout", "cell"),
}


def kernel_manager_class(
    sandbox: isolation.Sandbox | None, runtime: str, watches: list, unsandboxed_env: tuple = ()
) -> type[AsyncKernelManager]:
    """An AsyncKernelManager class whose kernel runs in `sandbox` (None: not isolated, never for credit), with its
    connection file (and, sandboxed, its Unix sockets) in the folder `runtime`; each sandbox's watch goes to
    `watches`."""

    class SandboxedKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            kwargs.setdefault(
                "connection_file", os.path.join(runtime, f"kernel-{uuid.uuid4().hex[:12]}.json")
            )
            if sandbox is not None:  # no network in the sandbox: Unix sockets in the runtime folder
                kwargs.update(transport="ipc", cache_ports=False)
            super().__init__(**kwargs)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if sandbox is not None:
                sandbox.hand_over()  # its folder, with the connection file just written, to the sandbox's user
                kernel_cmd = sandbox.command(kernel_cmd)
                kw["env"] = sandbox.env()
            else:
                kw["env"] = {**os.environ, **dict(unsandboxed_env)}
            await super()._async_launch_kernel(kernel_cmd, **kw)
            if sandbox is not None and self.provisioner is not None and self.provisioner.process is not None:
                watches.append(isolation.Watch(self.provisioner.process.pid, sandbox.limits, sandbox.workdir))

        async def _async_signal_kernel(self, signum: int) -> None:
            process = self.provisioner.process if self.provisioner is not None else None
            if sandbox is None or process is None or signum != signal.SIGINT:
                return await super()._async_signal_kernel(signum)
            for pid in isolation.sandboxed(process.pid):
                isolation.send(pid, signum)

    return SandboxedKernelManager


def restart_client(client: NotebookClient, nb, resources: dict, manager: type) -> None:
    """`client` made a fresh NotebookClient of `nb` with kernels of `manager`, ready for `setup_kernel`: killed once
    its last cell has run ("immediate"), not asked to exit (a graceful exit, torch's teardown included, took 0.6 s of
    the 2.3 s of grading one notebook of the tests' fixture lesson)."""
    NotebookClient.__init__(client, nb, None, kernel_manager_class=manager, shutdown_kernel="immediate")
    client.reset_execution_trackers()
    client._check_assign_resources(resources)
