"""A class of the course on one machine: JupyterHub, an nbgrader exchange, the instructor's formgrader (docs/class.md).

    sudo /opt/memlab-class/venv/bin/python -m classroom prepare --course /home/instructor/memlab-course \
        --instructor instructor --students alice bob --release /opt/memlab-class/release

`classroom.prepare` puts a class in place (the exchange, the course folder's owner and permissions, the configuration
files) and checks it as the students and the instructor see it; `jupyterhub_config.py` is the hub's configuration it
installs (LocalProcessSpawner: each server a process of its Linux user; with `prepare --docker-image`, each student's a
container of the image `python -m classroom image` builds, classroom/image.py and classroom/Dockerfile). Nothing here
is imported by the lessons, the toolkit or the grader.
"""
