# The operator's and the node agent's image: `elastore operator run`, `elastore agent run`.
# Online (the usual Python base, packages from PyPI and Debian):
#   docker build -t ghcr.io/elastore/elastore:0.1.0 .
# Offline, on a local Debian base with Swift preinstalled and a directory of wheels in the
# build context (what tests/testbed/images.py does here: no registry, no network in RUN):
#   podman build --network none --build-arg BASE=localhost/elastore-python-base:<hash> \
#     --build-arg WHEELS=wheels -t localhost/elastore:0.1.0 <context>
# RUN --mount needs BuildKit (docker >= 23's default builder) or buildah/podman.
ARG BASE=python:3.11-slim

# the venv, built in a stage of its own so that the source and the wheels stay out of the image
FROM ${BASE} AS build
# a directory of the build context holding every wheel the install needs (the package's
# dependencies, setuptools and wheel for its build): pip reads only it. Empty: PyPI.
ARG WHEELS=
WORKDIR /src
# The build context leaves the storage lab (elastore/lab/) out (.dockerignore): the image runs
# the operator and the node agent, and `elastore lab` / `elastore load` there only say that
# the lab is not part of this installation
COPY pyproject.toml README.md ./
COPY elastore ./elastore
# a regular install: the CRD and the models are package data (elastore/resources.py); the
# test bed (tests/testbed) is not in the package, nor the lab in this context
# (tests/test_packaging.py builds the wheel from the same context and checks both)
RUN --mount=type=bind,target=/ctx \
    python3 -m venv /opt/elastore \
    && /opt/elastore/bin/pip install --no-cache-dir --disable-pip-version-check \
       ${WHEELS:+--no-index --find-links=/ctx/${WHEELS}} '.[operator,agent]'

FROM ${BASE}
# Swift targets: the operator changes the rings with Swift's own swift-ring-builder, run under
# Debian's Python (/usr/bin/python3, /usr/bin/swift-ring-builder: Debian's package "swift").
# A local Debian base has it already (debootstrap --include).
RUN command -v swift-ring-builder >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends swift && rm -rf /var/lib/apt/lists/*; }
RUN useradd --uid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin elastore
COPY --from=build /opt/elastore /opt/elastore
# it runs on a read-only root file system (the chart's securityContext): nothing is written
# at start but under /tmp (an emptyDir in the chart), e.g. matplotlib's config directory
ENV PATH=/opt/elastore/bin:$PATH \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532
ENTRYPOINT ["elastore"]
CMD ["operator", "run"]
