"""The real cert-manager on the local control plane, built from its Go module (see build.sh).

    from devplatform import certmanager
    cm = certmanager.install(plane)        # CRDs + controller + cainjector; returns once ready
    certmanager.renew(plane, namespace=..., name=...)   # what `cmctl renew` does
    certmanager.stop(cm)                   # by PID

``config`` holds the pure builders (command lines, CRD rewrite, renewal status); ``installing`` the
shell that builds, applies, starts and stops.
"""

from devplatform.certmanager.config import CLUSTER_RESOURCE_NAMESPACE, CONTROLLERS, find_condition, is_issuing, is_ready
from devplatform.certmanager.installing import (
    CertManager,
    CertManagerError,
    InstallTimings,
    ensure_binaries,
    install,
    install_crds,
    log_paths,
    renew,
    stop,
)

__all__ = [
    "CLUSTER_RESOURCE_NAMESPACE",
    "CONTROLLERS",
    "CertManager",
    "CertManagerError",
    "InstallTimings",
    "ensure_binaries",
    "find_condition",
    "install",
    "install_crds",
    "is_issuing",
    "is_ready",
    "log_paths",
    "renew",
    "stop",
]
