"""JupyterHub for a class of the memlab course (docs/class.md).

`python -m classroom prepare` copies this file into the class folder next to class.json, which it reads: the
instructor, the students, the course folder, the environment the servers run, the JupyterLab views. Start the hub as
root (LocalProcessSpawner starts each user's server as that user):

    jupyterhub -f /srv/memlab-class/jupyterhub_config.py

With `prepare --docker-image IMAGE` each student's server is a container of IMAGE (DockerSpawner), started as her
Linux user; the instructor's stays a process. prepare rewrites this file; put a site's own settings (TLS, the port,
admins, limits such as c.DockerSpawner.mem_limit) in jupyterhub_config_local.py next to it, loaded last. Users log in
with their Linux password (JupyterHub's default PAMAuthenticator).
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
c.LocalProcessSpawner.cmd = [os.path.join(BIN, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.env_keep = ["LANG", "LC_ALL"]

# students' servers in containers (prepare --docker-image): class.json says, for each student, her user, what of the
# machine her container sees and its environment; the instructor's server stays a process of her Linux user, beside
# the course folder, the GPU and bubblewrap, which grading needs
DOCKER = CLASS.get("docker")
if DOCKER:
    from dockerspawner import DockerSpawner
    from jupyterhub.spawner import LocalProcessSpawner

    CONTAINERS = DOCKER["containers"]

    class ClassSpawner(LocalProcessSpawner):
        """Makes each user's spawner: a DockerSpawner for a student, a LocalProcessSpawner for the instructor.
        (JupyterHub has one spawner class, which it calls with the user; a class it accepts must be a Spawner with
        start, stop and poll, which this one never uses.)"""

        def __new__(cls, *args, user=None, **kwargs):
            chosen = DockerSpawner if user is not None and user.name in CONTAINERS else LocalProcessSpawner
            return chosen(*args, user=user, **kwargs)

    c.JupyterHub.spawner_class = ClassSpawner
    # the hub's API where the containers reach it: Docker's bridge gateway
    c.JupyterHub.hub_ip = DOCKER["hub_ip"]
    c.DockerSpawner.image = DOCKER["image"]
    c.DockerSpawner.pull_policy = "never"  # built on this machine by `python -m classroom image`
    c.DockerSpawner.remove = True  # what a student keeps is in her home, mounted
    c.DockerSpawner.extra_create_kwargs = lambda spawner: CONTAINERS[spawner.user.name]["create"]
    c.DockerSpawner.extra_host_config = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"]}


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
    name = spawner.user.name
    if DOCKER and name in CONTAINERS:
        spawner.volumes = CONTAINERS[name]["volumes"]
        spawner.notebook_dir = CONTAINERS[name]["create"]["working_dir"]
        environment = CONTAINERS[name]["environment"]
    else:
        environment = class_environment(name)
    # a new dict for each server: Spawner.environment is shared by every spawner that the configuration made
    spawner.environment = {**spawner.environment, **environment}


c.Spawner.pre_spawn_hook = pre_spawn_hook

LOCAL = os.path.join(HERE, "jupyterhub_config_local.py")
if os.path.exists(LOCAL):
    load_subconfig(LOCAL)  # noqa: F821
