"""Which admission-policy API each Kubernetes release serves.

Sources: the OpenAPI schemas shipped per release (kubernetes-validate 1.37.0 holds
ValidatingAdmissionPolicy v1 from 1.30, MutatingAdmissionPolicy v1alpha1 from 1.32, v1beta1
from 1.34 and v1 from 1.36), KEP-3488 (VAP GA in 1.30) and KEP-3962 (MAP alpha 1.32, beta
1.34, stable 1.36). A beta API added since 1.24 is off by default: MAP before 1.36 needs the
MutatingAdmissionPolicy feature gate and --runtime-config on the kube-apiserver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_VERSION = "1.36"
GROUP = "admissionregistration.k8s.io"


@dataclass(frozen=True, slots=True)
class Release:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Release:
        found = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", text.strip())
        if not found:
            raise ValueError(f"--kubernetes-version {text!r}: expected MAJOR.MINOR, e.g. 1.36")
        return cls(int(found.group(1)), int(found.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def key(self) -> tuple[int, int]:
        return self.major, self.minor

    def vap_version(self) -> str | None:
        return "v1" if self.key >= (1, 30) else None

    def map_version(self) -> str | None:
        if self.key >= (1, 36):
            return "v1"
        if self.key >= (1, 34):
            return "v1beta1"
        if self.key >= (1, 32):
            return "v1alpha1"
        return None

    def map_note(self) -> str | None:
        """What the cluster must enable for MutatingAdmissionPolicy, or None when it is on by default."""
        version = self.map_version()
        if version is None or version == "v1":
            return None
        return (
            f"MutatingAdmissionPolicy is {version[2:]} in {self}: enable the MutatingAdmissionPolicy feature gate "
            f"and --runtime-config={GROUP}/{version}=true on the kube-apiserver"
        )
