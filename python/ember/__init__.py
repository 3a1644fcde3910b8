"""Ember from Python: the process's life in the cluster, the key-value API
over numpy arrays (no copies), the model layer, and the training data
readers. ``ember.torch`` puts PyTorch embedding tables on Ember's servers.

A program is a worker, a server or the scheduler as its DMLC_* environment
says, and runs under the same launchers as C++ programs::

    scripts/local.sh 2 2 /usr/bin/python3 my_job.py

    import ember
    ember.start()
    if ember.is_server():
        server = ember.ModelServer()      # or ember.KVServer(app_id=0)
    elif ember.is_worker():
        client = ember.ModelClient()
        ...
    ember.finalize()                      # keep server/client alive until here

Errors of the C++ library raise ``ember.Error`` subclasses
(``InvalidArgumentError`` is also a ``ValueError``, ``UnavailableError`` a
``ConnectionError``, ``DeadlineExceededError`` a ``TimeoutError``) carrying
the C++ Status's message. docs/python.md describes everything.
"""

from ember._ember import (  # noqa: F401 (re-exported)
    AbortedError,
    CorruptionError,
    DeadlineExceededError,
    Error,
    InternalError,
    InvalidArgumentError,
    KVServer,
    KVWorker,
    ModelClient,
    ModelServer,
    NotFoundError,
    UnavailableError,
    barrier,
    finalize,
    is_scheduler,
    is_server,
    is_worker,
    num_servers,
    num_workers,
    rank,
    role,
    start,
    version,
)
from ember import data  # noqa: F401

__version__ = version()

__all__ = [
    "AbortedError", "CorruptionError", "DeadlineExceededError", "Error",
    "InternalError", "InvalidArgumentError", "KVServer", "KVWorker",
    "ModelClient", "ModelServer", "NotFoundError", "UnavailableError",
    "barrier", "data", "finalize", "is_scheduler", "is_server", "is_worker",
    "num_servers", "num_workers", "rank", "role", "start", "version",
]
