"""JupyterHub for a class of the memlab course (docs/class.md).

`python -m classroom prepare` copies this file into the class folder next to class.json, which it reads: the
instructor, the students, the course folder, the environment the servers run, the JupyterLab views. Start the hub as
root (LocalProcessSpawner starts each user's server as that user):

    jupyterhub -f /srv/memlab-class/jupyterhub_config.py

prepare rewrites this file; put a site's own settings (TLS, the port, admins, limits) in jupyterhub_config_local.py
next to it, loaded last. Users log in with their Linux password (JupyterHub's default PAMAuthenticator).
"""

import json
import os

c = get_config()  # noqa: F821  (JupyterHub's config loader defines it)

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "class.json"), encoding="utf-8") as f:
    CLASS = json.load(f)
INSTRUCTOR = CLASS["instructor"]

# who may log in: the instructor and the students, nobody else
c.Authenticator.allowed_users = {INSTRUCTOR, *CLASS["students"]}

# the hub's own state, root's only (prepare makes state/ with mode 0700)
STATE = os.path.join(HERE, "state")
c.JupyterHub.db_url = "sqlite:///" + os.path.join(STATE, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(STATE, "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE, "jupyterhub-proxy.pid")
if CLASS.get("subdomain_host"):
    # a subdomain per user: each server is an origin of its own, and formgrader may open inside the instructor's
    # JupyterLab (prepare allowed frames from 'self' on the instructor's server only)
    c.JupyterHub.subdomain_host = CLASS["subdomain_host"]

# every server runs the environment prepare was given, in JupyterLab, with nothing inherited from the hub's own
# environment (PYTHONPATH, PATH, VIRTUAL_ENV): each role's are set below
BIN = CLASS["python_bin"]
c.Spawner.cmd = [os.path.join(BIN, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.env_keep = ["LANG", "LC_ALL"]


def class_environment(name: str) -> dict:
    """The environment of `name`'s server: the role's JupyterLab view and nbgrader configuration
    (JUPYTER_CONFIG_PATH, ahead of the environment's own self-study view) and what its Python imports first: the
    instructor the course folder's own packages (the judge needs the grading references), a student the learner
    release (none of the course's solutions or references)."""
    role = "instructor" if name == INSTRUCTOR else "learner"
    env = {
        "JUPYTER_CONFIG_PATH": os.pathsep.join(CLASS["jupyter_config_path"][role]),
        "PATH": os.pathsep.join([BIN, "/usr/local/bin", "/usr/bin", "/bin"]),
    }
    if CLASS["pythonpath"][role]:
        env["PYTHONPATH"] = CLASS["pythonpath"][role]
    return env


def pre_spawn_hook(spawner):
    # a new dict for each server: Spawner.environment is shared by every spawner that the configuration made
    spawner.environment = {**spawner.environment, **class_environment(spawner.user.name)}


c.Spawner.pre_spawn_hook = pre_spawn_hook

LOCAL = os.path.join(HERE, "jupyterhub_config_local.py")
if os.path.exists(LOCAL):
    load_subconfig(LOCAL)  # noqa: F821
