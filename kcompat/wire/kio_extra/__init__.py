"""Schemas Apache Kafka 4.4 has and kio 0.6.5 lacks, declared in kio's form.

Theory of operation
-------------------
kio generates one frozen dataclass per (API, version) from Kafka's JSON schemas;
its reader and writer work from the dataclass fields alone, so a version kio
does not ship yet is declared here, one module per (API, version), the way kio
would generate it, and ``kcompat.wire.codec`` finds it like any other. A
version whose response has the shape of an older one kio knows declares only
its request; the response is written with the older entity, byte for byte the
same. Each module's docstring says what its version adds.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# (api key, version) -> the module declaring it
MODULES = {(18, 5): "api_versions_v5", (42, 3): "delete_groups_v3"}
# (api key, version) -> the older version whose response entity is written instead
SAME_RESPONSE_AS = {(18, 5): 4}


def module(api_key: int, version: int) -> ModuleType | None:
    name = MODULES.get((api_key, version))
    return importlib.import_module(f"{__name__}.{name}") if name else None
