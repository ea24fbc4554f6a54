"""ACLs in the metadata log: what CreateAcls and DeleteAcls commit.

Theory of operation
-------------------
The broker a CreateAcls or DeleteAcls reaches checks it (``kcompat.security.acl``,
Kafka 4.4's checks and messages) and sends the controller one change
(``controller.admin.submit``, forwarded from any broker): the bindings to
create and the bindings to delete — for DeleteAcls, the ACLs its filters
matched in the receiving broker's image, which its answer lists. The
controller turns the change into one ``acls`` record against its own image:
bindings it already has are not created again (Kafka answers a duplicate
with success and stores one), bindings it no longer has are not deleted;
nothing left to change commits nothing. Every broker applies the record to
``MetadataImage.acls`` in log order, so the authorizer of every broker sees
the same ACLs, they survive restarts and are part of the metadata checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kcompat.security.acl import AclBinding, AclStore


def intent(create: Iterable[AclBinding] = (),
           delete: Iterable[AclBinding] = ()) -> dict[str, Any]:
    """The change a broker submits to the controller."""
    return {"op": "acls", "name": "acls", "create": [b.to_list() for b in create],
            "delete": [b.to_list() for b in delete]}


def _bindings(rows: Sequence[Any]) -> list[AclBinding]:
    return list(dict.fromkeys(AclBinding.from_list(r) for r in rows))


def record(acls: AclStore, change: dict[str, Any]) -> dict[str, Any] | None:
    """On the controller: the ``acls`` record carrying out ``change`` against
    its image's ``acls``, or None when there is nothing to change."""
    create = [b for b in _bindings(change.get("create", ())) if b not in acls]
    delete = [b for b in _bindings(change.get("delete", ())) if b in acls]
    if not create and not delete:
        return None
    return {"type": "acls", "create": [b.to_list() for b in create],
            "delete": [b.to_list() for b in delete]}
