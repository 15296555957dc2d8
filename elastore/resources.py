"""The files elastore ships inside its package, behind one helper.

Every reader of a shipped file goes through here, so the package works the same from a
source checkout, an editable install and a wheel (the operator image installs the wheel):

* the built-in capacity models (``elastore models fit`` output): ``lab`` (fitted to the
  samples measured on real Cassandra, ``experiments/profiles/``) and ``placeholder`` (the
  documented law of :mod:`elastore.models.synthetic`);
* the CRDs the Helm chart installs: the ElasticPolicy CRD and kopf's peering CRDs (the
  chart's ``crds/`` holds the same files; tests keep them identical);
* the built-in Wikipedia trace.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from elastore.errors import ElastoreError

#: built-in model name -> file in ``elastore/models/data``
MODELS = {"lab": "lab-profile.json", "placeholder": "placeholder.json"}
CRD_FILE = "elasticpolicies.elastore.io.yaml"
#: kopf's ClusterKopfPeering and KopfPeering CRDs (the replicas' leader election)
PEERING_CRD_FILE = "kopf-peering.yaml"
TRACE_FILE = "all-projects-2008-10_2009-12-hourly.csv"


def _file(package: str, *parts: str) -> Path:
    path = Path(str(resources.files(package).joinpath(*parts)))
    if not path.is_file():
        raise ElastoreError(f"the installed elastore package lacks {'/'.join(parts)} "
                            f"(package data of {package}); reinstall it", str(path))
    return path


def builtin_model(name: str) -> Path:
    """The file of a built-in model: ``lab`` or ``placeholder``."""
    if name not in MODELS:
        raise ElastoreError(f"no built-in model {name!r}; choose from {', '.join(MODELS)}")
    return _file("elastore.models", "data", MODELS[name])


def crd_path() -> Path:
    """The ElasticPolicy CustomResourceDefinition (YAML)."""
    return _file("elastore.operator", "crds", CRD_FILE)


def crd_paths() -> list[Path]:
    """The files of every CRD the chart installs: the ElasticPolicy's, then kopf's peering
    CRDs (one file, two documents)."""
    return [crd_path(), _file("elastore.operator", "crds", PEERING_CRD_FILE)]


def builtin_trace() -> Path:
    """The built-in hourly Wikipedia trace (all projects, 2008-10 .. 2009-12)."""
    return _file("elastore.traces", "data", TRACE_FILE)
