# The operator's and the node agent's image: `elastore operator run`, `elastore agent run`. Build: docker build -t ghcr.io/elastore/elastore:0.1.0 .
# (Not built by this repo's CI: its machines have no container engine. The chart's tests run
# the same entry point, `elastore operator run`, as a process against a real API server.)
FROM python:3.11-slim
# Swift targets: the operator changes the rings with Swift's own swift-ring-builder, run under
# Debian's Python (/usr/bin/python3, /usr/bin/swift-ring-builder: Debian's package "swift")
RUN apt-get update && apt-get install -y --no-install-recommends swift \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# The build context leaves the storage lab (elastore/lab/) out (.dockerignore): the image runs
# the operator and the node agent, and `elastore lab` / `elastore load` there only say that
# the lab is not part of this installation
COPY pyproject.toml README.md ./
COPY elastore ./elastore
# a regular install: the CRD and the models are package data (elastore/resources.py); the
# test bed (tests/testbed) is not in the package, nor the lab in this context
# (tests/test_packaging.py builds the wheel from the same context and checks both)
RUN pip install --no-cache-dir '.[operator,agent]' && useradd --uid 65532 --no-create-home elastore
USER 65532
ENTRYPOINT ["elastore"]
CMD ["operator", "run"]
