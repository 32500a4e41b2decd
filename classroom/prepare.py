"""Put a class of the course in place on one machine, for JupyterHub (docs/class.md).

    sudo PYTHON -m classroom prepare --course /home/instructor/memlab-course --instructor instructor \\
        --students alice bob [--release /opt/memlab-class/release] [--course-id memlab] \\
        [--exchange /srv/nbgrader/exchange] [--class-dir /srv/memlab-class] [--etc-dir /etc/jupyter]

Run it as root, from the course folder (`python -m` finds this package there), with the Python of the environment
the users' servers run (PYTHON; `--python` names another). The users must exist (`useradd -m alice`). It

1. makes the course folder the instructor's (owner, group) and closes it to everyone else (mode 0700): solutions/,
   the grading references and the gradebook are never readable by a student;
2. makes nbgrader's exchange: `--exchange` owned by root, writable by everyone, sticky (mode 1777, as nbgrader's
   `Exchange.root` must be), and the course's folder in it, the instructor's (mode 0755), so that no student can
   claim it first;
3. writes nbgrader's global configuration, `--etc-dir`/nbgrader_config.py (the exchange, the course id, Validate's
   time per cell), and the class folder `--class-dir`: class.json (what was given here), jupyterhub_config.py (a
   copy of classroom/jupyterhub_config.py, which reads class.json), the JupyterLab views (jupyter/learner: the
   assignment list and Validate, from jupyter-config/learner-hub; jupyter/instructor: everything, from
   jupyter-config/instructor, plus the instructor's nbgrader_config.py naming the course folder) and state/ (the
   hub's database and cookie secret, root's only);
4. checks the class as its users see it, running as each of them: no student can read the course folder; the
   students' Python imports the toolkit from a place that holds neither solutions/ nor the grading references (the
   learner release: `--release DIR`, made by `python scripts/release.py DIR`, or an environment installed from
   it); the instructor's Python imports the course's own packages, and bubblewrap works for the instructor (grading
   runs every submission in its sandbox, as the instructor, from formgrader).

With `--docker-image IMAGE` (built by `python -m classroom image`) each student's server is a container of IMAGE as
her user, which sees of the machine only her home, the exchange and the class's configuration (container()); the
checks of step 4 then run in such a container, and class.json holds each student's container.

Running it again changes only what differs, and says what it changed. It refuses, saying why, to take over a file
or folder it did not make (a global nbgrader_config.py written by someone else, a class folder that is not empty).
Then start the hub: `jupyterhub -f CLASS_DIR/jupyterhub_config.py`.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from classroom import image

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VIEWS = {
    "learner": REPO / "jupyter-config" / "learner-hub",
    "instructor": REPO / "jupyter-config" / "instructor",
}
HUB_CONFIG = HERE / "jupyterhub_config.py"
MARKER = "# Written by `python -m classroom prepare` (the memlab course's class setup): run it again to change this file."
WRITTEN_BY = "python -m classroom prepare"
#: the Linux folders Jupyter always reads its configuration from (jupyter_core.paths.SYSTEM_CONFIG_PATH)
SYSTEM_CONFIG_PATH = ("/usr/local/etc/jupyter", "/etc/jupyter")
#: Validate in a student's JupyterLab runs each cell this long at most, as grading does (the course's
#: nbgrader_config.py, Execute.timeout, which students cannot read); nbgrader's own default is 30 s
VALIDATE_TIMEOUT = 300
COURSE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ClassError(Exception):
    """The class cannot be put in place as asked; the message says why and what to do."""


def say(text: str) -> None:
    print(f"classroom: {text}", flush=True)


# ---- the users -------------------------------------------------------------------------------------------------


def user(name: str, role: str) -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ClassError(
            f"the {role} {name!r} is not a user of this machine: create it first (useradd -m {name}; passwd {name})"
        ) from None
    if entry.pw_uid == 0:
        raise ClassError(f"the {role} {name!r} is root: give the class ordinary users")
    return entry


def users(instructor: str, students: list[str]) -> tuple[pwd.struct_passwd, list[pwd.struct_passwd]]:
    if not students:
        raise ClassError("no students: give --students NAME ... or --students-file FILE")
    if instructor in students:
        raise ClassError(f"{instructor!r} is both the instructor and a student")
    teacher = user(instructor, "instructor")
    learners = [user(name, "student") for name in dict.fromkeys(students)]
    shared = [s.pw_name for s in learners if s.pw_uid == teacher.pw_uid]
    if shared:
        raise ClassError(f"{', '.join(shared)} share the instructor's user id {teacher.pw_uid}")
    return teacher, learners


def read_roster(path: Path) -> list[str]:
    """One user name a line; blank lines and # comments ignored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ClassError(f"cannot read the students file {path}: {error.strerror}") from None
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


# ---- the course folder -------------------------------------------------------------------------------------------


def course_folder(course: Path, teacher: pwd.struct_passwd) -> Path:
    """The course folder, made the instructor's and closed to everyone else."""
    if not course.is_absolute():
        raise ClassError(f"--course {course}: give an absolute path")
    if course.is_symlink() or not course.is_dir():
        raise ClassError(
            f"the course folder {course} does not exist (or is a link): put the course there as the instructor, "
            f"e.g. sudo -u {teacher.pw_name} git clone <the course's repository> {course}"
        )
    missing = [name for name in ("nbgrader_config.py", "solutions") if not (course / name).exists()]
    if missing:
        raise ClassError(f"{course} is not a course folder: it has no {' and no '.join(missing)}")
    home = Path(teacher.pw_dir).resolve()
    if not course.resolve().is_relative_to(home) or course.resolve() == home:
        # formgrader refuses a course outside the server's root folder, the instructor's home under the hub
        # (nbgrader/server_extensions/formgrader/formgrader.py, init_tornado_settings: "not a subdirectory")
        raise ClassError(
            f"the course folder {course} must be a folder inside the instructor's home {home}: formgrader only "
            "serves a course inside the folder the instructor's Jupyter server serves"
        )
    changed = 0
    for root, dirs, files in os.walk(course):
        for name in [".", *dirs, *files]:
            path = os.path.join(root, name) if name != "." else root
            st = os.lstat(path)
            if (st.st_uid, st.st_gid) != (teacher.pw_uid, teacher.pw_gid):
                os.lchown(path, teacher.pw_uid, teacher.pw_gid)
                changed += 1
    if changed:
        say(f"made {changed} files and folders of {course} the instructor's ({teacher.pw_name})")
    mode = stat.S_IMODE(os.stat(course).st_mode)
    if mode != 0o700:
        os.chmod(course, 0o700)
        say(f"closed {course} to everyone but the instructor (mode {mode:o} -> 700)")
    return course


# ---- the exchange ------------------------------------------------------------------------------------------------


def exchange(root: Path, course_id: str, teacher: pwd.struct_passwd) -> None:
    """nbgrader's exchange: root's, writable by everyone, sticky; the course's folder in it the instructor's."""
    if not root.is_absolute():
        raise ClassError(f"--exchange {root}: give an absolute path")
    if not root.exists() and not root.is_symlink():
        root.parent.mkdir(parents=True, exist_ok=True)
        root.mkdir()
        say(f"made the exchange {root}")
    st = os.lstat(root)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ClassError(
            f"the exchange {root} is not a folder (a link or a file): remove it or choose another"
        )
    if st.st_uid != 0:
        raise ClassError(
            f"the exchange {root} belongs to {_owner(st.st_uid)}, who could change what everyone hands in: "
            f"chown root:root {root}"
        )
    if stat.S_IMODE(st.st_mode) != 0o1777:
        # nbgrader checks that every user may write it (nbgrader/exchange/default/exchange.py, ensure_root); the
        # sticky bit keeps anyone from renaming or deleting another user's folder in it
        os.chmod(root, 0o1777)
        say(f"made the exchange {root} writable by every user, sticky (mode 1777)")
    folder = root / course_id
    if not folder.exists() and not folder.is_symlink():
        folder.mkdir()
        os.chown(folder, teacher.pw_uid, teacher.pw_gid)
        os.chmod(folder, 0o755)
        say(f"made the course's folder of the exchange {folder}, the instructor's")
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ClassError(f"{folder} is not a folder (a link or a file): remove it")
    if st.st_uid != teacher.pw_uid:
        # nbgrader release_assignment refuses a course folder its user does not own (ensure_directory)
        raise ClassError(
            f"{folder} belongs to {_owner(st.st_uid)}, not to the instructor: nbgrader would refuse to release into "
            f"it. Remove it (rm -r {folder}) and run this again"
        )


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user id {uid}"


# ---- the configuration files ----------------------------------------------------------------------------------------


def global_nbgrader_config(etc: Path, exchange_root: Path, course_id: str) -> None:
    """nbgrader's configuration for every user of the machine: the exchange and the course."""
    text = "\n".join(
        [
            MARKER,
            '"""nbgrader for every user of this machine: the class\'s exchange and course (docs/class.md)."""',
            "",
            "c = get_config()  # noqa: F821",
            f"c.Exchange.root = {str(exchange_root)!r}",
            f"c.CourseDirectory.course_id = {course_id!r}",
            "# Validate in a student's JupyterLab: each cell may run as long as grading lets it (the course's",
            "# nbgrader_config.py, which students cannot read, says the same); nbgrader's own default is 30 s",
            f"c.Execute.timeout = {VALIDATE_TIMEOUT}",
            "c.Execute.interrupt_on_timeout = True",
            "",
        ]
    )
    etc.mkdir(parents=True, exist_ok=True)
    write_ours(etc / "nbgrader_config.py", text)


def write_ours(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file this command makes (first line MARKER); refuse to replace one it did not make."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ClassError(f"{path} is not a regular file: remove it")
    if path.exists():
        old = path.read_text(encoding="utf-8", errors="replace")
        if not old.startswith(MARKER):
            raise ClassError(
                f"{path} exists and was not written by this command: move it away (and merge what it sets into "
                "the class's files by hand) before running it again"
            )
        if old == text and stat.S_IMODE(path.stat().st_mode) == mode:
            return
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    say(f"wrote {path}")


def class_folder(folder: Path, settings: dict, subdomain_host: str) -> None:
    """The class folder: class.json, jupyterhub_config.py, the two JupyterLab views, state/."""
    if not folder.is_absolute():
        raise ClassError(f"--class-dir {folder}: give an absolute path")
    record = folder / "class.json"
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ClassError(f"the class folder {folder} is not a folder: remove it or choose another")
    if folder.exists() and any(folder.iterdir()):
        try:
            ours = json.loads(record.read_text(encoding="utf-8")).get("written_by") == WRITTEN_BY
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise ClassError(
                f"the class folder {folder} is not empty and holds no class.json of this command: choose an empty "
                "or new folder for --class-dir"
            )
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, 0, 0)
    os.chmod(folder, 0o755)
    (folder / "state").mkdir(exist_ok=True)
    os.chmod(folder / "state", 0o700)

    # the views are made again in a new folder, which replaces the old one where they differ: a file dropped from
    # the repository's views is dropped here too
    views = folder / "jupyter"
    fresh = folder / ".jupyter.new"
    if fresh.exists():
        shutil.rmtree(fresh)
    write_views(fresh, settings["course"], subdomain_host)
    if tree(fresh) != tree(views):
        if views.exists():
            shutil.rmtree(views)
        fresh.rename(views)
        say(f"wrote the JupyterLab views of the class in {views} (learner: assignment list and Validate)")
    else:
        shutil.rmtree(fresh)

    hub_config = HUB_CONFIG.read_text(encoding="utf-8")
    target = folder / "jupyterhub_config.py"
    if not target.exists() or target.read_text(encoding="utf-8") != hub_config:
        target.write_text(hub_config, encoding="utf-8")
        say(f"wrote {target}")
    os.chmod(target, 0o644)
    text = json.dumps(settings, indent=2) + "\n"
    if not record.exists() or record.read_text(encoding="utf-8") != text:
        record.write_text(text, encoding="utf-8")
        say(f"wrote {record}")
    os.chmod(record, 0o644)


def write_views(views: Path, course: str, subdomain_host: str) -> None:
    """The class's JupyterLab views in `views`: learner/ (jupyter-config/learner-hub) and instructor/
    (jupyter-config/instructor, the instructor's nbgrader_config.py and, with subdomains, formgrader's frames)."""
    for role, source in VIEWS.items():
        shutil.copytree(source, views / role, ignore=shutil.ignore_patterns("*.md"))
    (views / "instructor" / "nbgrader_config.py").write_text(
        "\n".join(
            [
                MARKER,
                '"""nbgrader as the instructor runs it (formgrader, the command line): the course folder.',
                "",
                "nbgrader 0.9.6 then reads the course's own nbgrader_config.py from that folder by itself",
                "(NbGrader.initialize, nbgrader/apps/baseapp.py): its gradebook, its preprocessors, its seed.",
                '"""',
                "",
                "c = get_config()  # noqa: F821",
                f"c.CourseDirectory.root = {course!r}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    if subdomain_host:
        # formgrader's tab in JupyterLab is an iframe of the instructor's own server, which JupyterHub >= 4.1 forbids
        # (frame-ancestors 'none'). With a subdomain per user, 'self' is the instructor's own server only.
        headers = {"Content-Security-Policy": "frame-ancestors 'self'"}
        # (a jupyter_server_config.json: the files of jupyter_server_config.d/ are read for jpserver_extensions only)
        frames = views / "instructor" / "jupyter_server_config.json"
        frames.write_text(
            json.dumps({"ServerApp": {"tornado_settings": {"headers": headers}}}, indent=2) + "\n",
            encoding="utf-8",
        )
    for path in [views, *views.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(path, 0, 0)
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes ({} where it does not exist)."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# ---- the checks, as the users ----------------------------------------------------------------------------------------

#: run as a user with the environment the hub gives that user's server: what the user can read and import
PROBE = r"""
import importlib.util, json, os, sys

course, exchange, course_id = sys.argv[1:4]
found = {}
for name in ("memlab", "autograders", "grading", "nbgrader", "jupyterhub"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception as error:
        spec = None
    found[name] = os.path.dirname(spec.origin) if spec and spec.origin else None


def listable(path):
    try:
        os.listdir(path)
        return True
    except OSError:
        return False


kit = found["autograders"]
try:
    from importlib.metadata import version
    hub = version("jupyterhub")
except Exception:
    hub = None
print(json.dumps({
    "found": found,
    "jupyterhub_version": hub,
    "course_readable": listable(course),
    "course_writable": os.access(course, os.W_OK | os.X_OK),
    "references": bool(kit) and listable(os.path.join(kit, "references")),
    "solutions": bool(kit) and listable(os.path.join(os.path.dirname(kit), "solutions")),
    "exchange_writable": os.access(exchange, os.W_OK | os.X_OK),
    "course_exchange_readable": os.access(os.path.join(exchange, course_id), os.R_OK | os.X_OK),
}))
"""


def environment_of(entry: pwd.struct_passwd, settings: dict, role: str) -> dict[str, str]:
    """The environment the class's hub gives `entry`'s server (classroom/jupyterhub_config.py)."""
    env = {
        "HOME": entry.pw_dir,
        "USER": entry.pw_name,
        "PATH": os.pathsep.join([settings["python_bin"], "/usr/local/bin", "/usr/bin", "/bin"]),
        "JUPYTER_CONFIG_PATH": os.pathsep.join(settings["jupyter_config_path"][role]),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    if settings["pythonpath"][role]:
        env["PYTHONPATH"] = settings["pythonpath"][role]
    return env


def as_user(entry: pwd.struct_passwd, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ClassError(
            "setpriv (util-linux) is needed to check the class as its users: apt-get install util-linux"
        )
    # through env(1): the command is looked up and started as the user (setpriv itself may reach a program the user
    # cannot, e.g. an interpreter under /root)
    return subprocess.run(
        [
            setpriv,
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--init-groups",
            "/usr/bin/env",
            "--",
            *argv,
        ],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )


def probe(entry: pwd.struct_passwd, settings: dict, role: str) -> dict:
    """PROBE run as `entry` where the hub runs that user's server: a process of the user on this machine, or, for a
    student of a class in containers, a container of the class's image as the hub makes it."""
    inputs = [PROBE, settings["course"], settings["exchange"], settings["course_id"]]
    docker = settings["docker"]
    if role == "learner" and docker:
        where = f"the image {docker['image']}"
        done = in_container(docker, docker["containers"][entry.pw_name], ["python3", "-c", *inputs])
    else:
        python = os.path.join(settings["python_bin"], "python")
        where = python
        done = as_user(entry, [python, "-c", *inputs], environment_of(entry, settings, role))
    if done.returncode != 0:
        raise ClassError(
            f"{where} does not run as {entry.pw_name}: {(done.stderr or done.stdout).strip()[-400:]} "
            "(every user must be able to read and run the environment the hub starts their servers with)"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_students(learners: list[pwd.struct_passwd], settings: dict) -> None:
    for entry in learners:
        seen = probe(entry, settings, "learner")
        name = entry.pw_name
        if seen["course_readable"]:
            raise ClassError(
                f"{name} can read the course folder {settings['course']}: check its ACLs and groups"
            )
        if not seen["exchange_writable"] or not seen["course_exchange_readable"]:
            raise ClassError(f"{name} cannot use the exchange {settings['exchange']}")
        missing = [m for m in ("memlab", "autograders", "nbgrader", "jupyterhub") if not seen["found"][m]]
        docker = settings["docker"]
        if missing and docker:
            raise ClassError(
                f"{name}'s server, a container of {docker['image']}, cannot import {', '.join(missing)}: build the "
                f"image with  python -m classroom image --tag {docker['image']}"
            )
        if missing:
            raise ClassError(
                f"{name}'s Python ({settings['python_bin']}) cannot import {', '.join(missing)}: install the "
                "environment from the learner release (docs/class.md) or give --release DIR"
            )
        if docker and seen["jupyterhub_version"] != docker["jupyterhub_version"]:
            raise ClassError(
                f"the image {docker['image']} has JupyterHub {seen['jupyterhub_version']}, the hub "
                f"{docker['jupyterhub_version']}: build the image again with the hub's Python "
                f"(python -m classroom image --tag {docker['image']})"
            )
        if seen["references"] or seen["solutions"]:
            kit = seen["found"]["autograders"]
            what = "the grading references" if seen["references"] else "the solutions"
            raise ClassError(
                f"{name} imports autograders from {kit}, next to which {what} can be read: students must import the "
                "learner release (python scripts/release.py DIR, then --release DIR, or an environment installed "
                "from it), never the course's repository"
            )
    say(
        f"checked as each of the {len(learners)} students: the course folder is closed to them, the exchange open"
    )


def check_instructor(teacher: pwd.struct_passwd, settings: dict) -> None:
    seen = probe(teacher, settings, "instructor")
    if not seen["course_writable"]:
        raise ClassError(f"the instructor cannot write the course folder {settings['course']}")
    missing = [
        m for m in ("memlab", "autograders", "grading", "nbgrader", "jupyterhub") if not seen["found"][m]
    ]
    if missing:
        raise ClassError(f"the instructor's Python cannot import {', '.join(missing)}")
    if not seen["references"]:
        raise ClassError(
            f"the instructor imports autograders from {seen['found']['autograders']}, which has no grading "
            "references (autograders/references/): the judge could not grade. The course folder must be the whole "
            "course (a clone of its repository), not the learner release"
        )
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise ClassError("grading sandboxes every submission with bubblewrap: apt-get install bubblewrap")
    done = as_user(
        teacher,
        [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"],
        environment_of(teacher, settings, "instructor"),
    )
    if done.returncode != 0:
        raise ClassError(
            f"bubblewrap cannot make its sandbox as the instructor ({done.stderr.strip()[:200]}): formgrader's "
            "Autograde needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu "
            "24.04 also kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)"
        )
    say(
        f"checked as the instructor ({teacher.pw_name}): the course's packages with their grading references, "
        "bubblewrap's sandbox"
    )


def check_release(release: Path) -> Path:
    if not release.is_absolute():
        raise ClassError(f"--release {release}: give an absolute path")
    if not (release / "memlab").is_dir() or not (release / "autograders").is_dir():
        raise ClassError(
            f"{release} is not a learner release (python scripts/release.py {release} makes one)"
        )
    if (release / "solutions").exists() or (release / "autograders" / "references").exists():
        raise ClassError(
            f"{release} holds solutions/ or autograders/references/: it is the course, not its learner release "
            "(python scripts/release.py DIR makes one)"
        )
    return release


# ---- students in containers (DockerSpawner) ------------------------------------------------------------------------

#: a student's container holds these accounts only: root and nobody, whom the image's files name, and the student
BASE_ACCOUNTS = {
    "passwd": ["root:x:0:0:root:/root:/bin/sh", "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"],
    "group": ["root:x:0:", "nogroup:x:65534:"],
}


def docker_command() -> str:
    docker = shutil.which("docker")
    if docker is None:
        raise ClassError("--docker-image: no docker command on this machine (install Docker, docs/class.md)")
    return docker


def docker_class(image: str, python_bin: str, class_dir: Path) -> dict:
    """The containers' part of class.json without the students: the image (built on this machine), the address the
    hub's API listens on for them (the gateway of Docker's default network) and the hub's JupyterHub version."""
    docker = docker_command()
    found = subprocess.run([docker, "image", "inspect", image], capture_output=True, text=True)
    if found.returncode != 0:
        raise ClassError(
            f"no image {image!r} here ({(found.stderr or found.stdout).strip()[:200]}): build it with  "
            f"python -m classroom image --tag {image}"
        )
    gateway = subprocess.run(
        [docker, "network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}"],
        capture_output=True,
        text=True,
    )
    if gateway.returncode != 0 or not gateway.stdout.strip():
        raise ClassError(f"cannot read Docker's bridge network: {gateway.stderr.strip()[:200]}")
    hub = subprocess.run(
        [
            os.path.join(python_bin, "python"),
            "-c",
            "import dockerspawner, importlib.metadata as m; print(m.version('jupyterhub'))",
        ],
        capture_output=True,
        text=True,
    )
    if hub.returncode != 0:
        raise ClassError(
            f"the hub's Python ({python_bin}) cannot import dockerspawner: pip install dockerspawner into it"
        )
    return {
        "image": image,
        "hub_ip": gateway.stdout.strip(),
        "jupyterhub_version": hub.stdout.strip(),
        "accounts": str(class_dir / "containers"),
        "containers": {},
    }


def container(entry: pwd.struct_passwd, settings: dict) -> dict:
    """What the hub gives `entry`'s container (classroom/jupyterhub_config.py reads it from class.json): the student's
    user and group ids, and of the machine only her home, the exchange, nbgrader's global configuration and the
    class's learner view, each at its path on the machine; her account in /etc/passwd and /etc/group."""
    accounts = Path(settings["docker"]["accounts"]) / entry.pw_name
    nbgrader_config = os.path.join(settings["etc_dir"], "nbgrader_config.py")
    environment = environment_of(entry, settings, "learner")
    return {
        # docker's own create arguments: the user, and her home as the working folder (nbgrader's assignment list
        # fetches into the server's working folder, whatever JupyterLab's root is)
        "create": {"user": f"{entry.pw_uid}:{entry.pw_gid}", "working_dir": entry.pw_dir},
        "volumes": {
            entry.pw_dir: {"bind": entry.pw_dir, "mode": "rw"},
            settings["exchange"]: {"bind": settings["exchange"], "mode": "rw"},
            nbgrader_config: {"bind": nbgrader_config, "mode": "ro"},
            **{view: {"bind": view, "mode": "ro"} for view in settings["jupyter_config_path"]["learner"]},
            str(accounts / "passwd"): {"bind": "/etc/passwd", "mode": "ro"},
            str(accounts / "group"): {"bind": "/etc/group", "mode": "ro"},
        },
        # the image's own PATH and Python: nothing of this machine's
        "environment": {k: environment[k] for k in ("HOME", "USER", "JUPYTER_CONFIG_PATH", "LANG")},
    }


def in_container(docker: dict, spec: dict, argv: list[str]) -> subprocess.CompletedProcess:
    """argv in a container of the class's image as the hub would start it for `spec`'s student, without a network
    and with only the mounts that exist yet (prepare checks before it writes the class's files)."""
    command = [docker_command(), "run", "--rm", "--network", "none", "--user", spec["create"]["user"]]
    command += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    for host, mount in spec["volumes"].items():
        if os.path.exists(host):
            command += ["--volume", f"{host}:{mount['bind']}:{mount['mode']}"]
    for name, value in spec["environment"].items():
        command += ["--env", f"{name}={value}"]
    return subprocess.run([*command, docker["image"], *argv], capture_output=True, text=True, timeout=300)


def container_accounts(folder: Path, learners: list[pwd.struct_passwd]) -> None:
    """Each student's /etc/passwd and /etc/group in her container (nbgrader names the user from them); those of
    students no longer in the class are removed."""
    if folder.is_dir():
        for old in sorted(set(p.name for p in folder.iterdir()) - {e.pw_name for e in learners}):
            shutil.rmtree(folder / old)
            say(f"removed the container account of {old}, no longer a student of the class")
    for entry in learners:
        group = _group_name(entry.pw_gid, entry.pw_name)
        lines = {
            "passwd": [f"{entry.pw_name}:x:{entry.pw_uid}:{entry.pw_gid}::{entry.pw_dir}:/bin/bash"],
            "group": [f"{group}:x:{entry.pw_gid}:"],
        }
        for name, own in lines.items():
            path = folder / entry.pw_name / name
            path.parent.mkdir(parents=True, exist_ok=True)
            text = "\n".join(BASE_ACCOUNTS[name] + own) + "\n"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                say(f"wrote {path}")
            os.chmod(path, 0o644)


def _group_name(gid: int, fallback: str) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return fallback


# ---- the command ---------------------------------------------------------------------------------------------------


def prepare(args: argparse.Namespace) -> dict:
    if os.geteuid() != 0:
        raise ClassError(
            "run it as root (sudo): it sets owners and modes of the course folder and the exchange"
        )
    if not COURSE_ID.match(args.course_id):
        raise ClassError(f"--course-id {args.course_id!r}: letters, digits, '.', '_' and '-' only")
    students = list(args.students or []) + (read_roster(args.students_file) if args.students_file else [])
    teacher, learners = users(args.instructor, students)
    python_bin = os.path.dirname(os.path.abspath(args.python))  # not resolved: a venv's python is a link
    if not os.access(os.path.join(python_bin, "jupyterhub-singleuser"), os.X_OK):
        raise ClassError(
            f"{python_bin} has no jupyterhub-singleuser: install jupyterhub into the environment the servers run "
            "(pip install jupyterhub), or name its Python with --python"
        )
    release = check_release(args.release) if args.release else None
    course = course_folder(args.course, teacher)
    exchange(args.exchange, args.course_id, teacher)

    views = args.class_dir / "jupyter"
    extra = [] if str(args.etc_dir) in SYSTEM_CONFIG_PATH else [str(args.etc_dir)]
    settings = {
        "written_by": WRITTEN_BY,
        "course_id": args.course_id,
        "course": str(course),
        "instructor": teacher.pw_name,
        "students": [s.pw_name for s in learners],
        "exchange": str(args.exchange),
        "etc_dir": str(args.etc_dir),
        "python_bin": python_bin,
        "subdomain_host": args.subdomain_host or "",
        # JupyterLab's view and nbgrader's configuration of each: the class's view first (over the environment's
        # self-study learner view), then the global nbgrader configuration where it is not a system folder
        "jupyter_config_path": {
            "learner": [str(views / "learner"), *extra],
            "instructor": [str(views / "instructor"), *extra],
        },
        # what each one's Python imports first: the instructor the course's own packages (with the grading
        # references the judge needs), the students the learner release (or the environment's, from it)
        "pythonpath": {"instructor": str(course), "learner": str(release) if release else ""},
        # students' servers in containers of this image (--docker-image), the instructor's a process as above
        "docker": docker_class(args.docker_image, python_bin, args.class_dir) if args.docker_image else None,
    }
    if settings["docker"]:
        settings["docker"]["containers"] = {s.pw_name: container(s, settings) for s in learners}
    # checked before any configuration is written: a class that would expose the solutions is never configured
    check_students(learners, settings)
    check_instructor(teacher, settings)
    global_nbgrader_config(args.etc_dir, args.exchange, args.course_id)
    class_folder(args.class_dir, settings, args.subdomain_host or "")
    if settings["docker"]:
        container_accounts(Path(settings["docker"]["accounts"]), learners)
    say(f"ready: start the hub with  jupyterhub -f {args.class_dir / 'jupyterhub_config.py'}")
    return settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m classroom",
        description="Put a class of the course in place for JupyterHub (docs/class.md).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("prepare", help="the exchange, the course folder, the configuration; then check them")
    q.add_argument(
        "--course", type=Path, required=True, help="the course folder, inside the instructor's home"
    )
    q.add_argument("--instructor", required=True, help="the instructor's user name")
    q.add_argument("--students", nargs="+", metavar="NAME", help="the students' user names")
    q.add_argument("--students-file", type=Path, metavar="FILE", help="the students' user names, one a line")
    q.add_argument("--course-id", default="memlab", help="nbgrader's course id (default: %(default)s)")
    q.add_argument(
        "--exchange", type=Path, default=Path("/srv/nbgrader/exchange"), help="default: %(default)s"
    )
    q.add_argument("--class-dir", type=Path, default=Path("/srv/memlab-class"), help="default: %(default)s")
    q.add_argument(
        "--etc-dir",
        type=Path,
        default=Path("/etc/jupyter"),
        help="where nbgrader's global nbgrader_config.py goes (default: %(default)s)",
    )
    q.add_argument(
        "--python",
        default=sys.executable,
        help="the Python of the environment the users' servers run (default: this one, %(default)s)",
    )
    q.add_argument(
        "--release",
        type=Path,
        help="the learner release the students' Python imports first (python scripts/release.py DIR makes it)",
    )
    q.add_argument(
        "--subdomain-host",
        default="",
        metavar="URL",
        help="a subdomain per user (JupyterHub.subdomain_host, e.g. https://hub.example.org): formgrader then "
        "opens inside the instructor's JupyterLab",
    )
    q.add_argument(
        "--docker-image",
        metavar="IMAGE",
        help="run each student's server in a container of IMAGE (made by `python -m classroom image`) with "
        "DockerSpawner; the instructor's stays a process on this machine",
    )
    image.add_arguments(
        sub.add_parser(
            "image",
            help="build the students' image (for --docker-image)",
            description=image.__doc__.split("\n\n")[2].replace("\n", " "),
        )
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "image":
            image.build(args)
        else:
            prepare(args)
    except (ClassError, image.ImageError) as error:
        print(f"classroom: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
