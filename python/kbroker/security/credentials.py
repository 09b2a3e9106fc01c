"""`CredentialCache`: every user's SCRAM credentials, as the broker last read them.

Fed from where users' configs are kept (ZooKeeper's ``/config/users/<user>``
in a cluster, followed through its change notifications; the metadata store
on one node): each user's config holds one entry per mechanism
(``SCRAM-SHA-256`` -> Kafka's credential text). The SCRAM servers read it
on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kbroker.security.scram import MECHANISMS, ScramCredential

log = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self) -> None:
        self._by_user: dict[str, dict[str, ScramCredential]] = {}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def users(self) -> Mapping[str, Mapping[str, ScramCredential]]:
        return self._by_user

    def update_user(self, user: str, configs: Mapping[str, str]) -> None:
        """Takes a user's configs (quotas and credentials alike) and keeps the credentials."""
        found: dict[str, ScramCredential] = {}
        for mechanism in MECHANISMS:
            text = configs.get(mechanism)
            if text is None:
                continue
            try:
                found[mechanism] = ScramCredential.from_kafka(text)
            except ValueError as exc:
                log.warning("ignoring the %s credential of user %r: %s", mechanism, user, exc)
        if found:
            self._by_user[user] = found
        else:
            self._by_user.pop(user, None)

    def remove_user(self, user: str) -> None:
        self._by_user.pop(user, None)
