"""`AclAuthorizer`: Kafka's ACL authorizer (kafka.security.authorizer.AclAuthorizer), in memory.

Answers "may this principal, from this host, do this operation on this
resource" the way Kafka's AclAuthorizer does:

- a super user (``super.users``, ``User:a;User:b``) may do everything;
- the ACLs that apply to a resource are those on its literal name, on the
  literal "*" of its type, and on every PREFIXED pattern its name starts
  with (a prefix as long as the name included; a PREFIXED "*" is the
  character, not a wildcard);
- a resource with no ACL at all is allowed to everyone exactly when
  ``allow.everyone.if.no.acl.found`` is true;
- otherwise a DENY that matches (the principal or ``User:*``, the host or
  "*", the operation or ALL) refuses, whatever ALLOWs say; then an ALLOW
  that matches permits, where Read, Write, Delete and Alter also allow
  Describe and AlterConfigs allows DescribeConfigs.

Hosts are compared as plain addresses ("127.0.0.1"); RequestContext's
"/127.0.0.1" form is accepted too. Answers are cached per (principal,
host, operation, resource), and the cache is dropped whenever an ACL
changes, so a Produce or Fetch check is one dictionary lookup.

The authorizer keeps the ACLs; where they live is an `AclStorage` (the
single node's metadata store, or ZooKeeper) that `create_acls` and
`delete_acls` write through with versioned, retried updates as Kafka's
authorizer does, and whose changes reach it through `set_resource` (a
ZooKeeper change notification) or `replace_all` (loading). Every change is
made under `updating`, so a change read from storage never overtakes one
made here.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kbroker.config import BrokerConfig, ConfigError
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    acl_host,
    allowing_operations,
    creation_error,
    operations_bitfield,
    principal_parts,
    storable_name,
)

log = logging.getLogger(__name__)

# The class names Kafka's brokers take for their ACL authorizer; both select this one.
AUTHORIZER_CLASSES = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
)
# The version of a resource that is not stored.
ABSENT = -1
# Kafka's AclAuthorizer: 10 retries of a conditional update, 100-150 ms apart.
UPDATE_ATTEMPTS = 11
RETRY_BACKOFF_S = (0.1, 0.15)
# Cached decisions kept before the cache starts over (bounds memory, not correctness).
MAX_CACHED_DECISIONS = 100_000

Entries = frozenset[AccessControlEntry]
# (principal, host, operation, permission, resource type, pattern type)
_TypeKey = tuple[str, str, AclOperation, PermissionType, ResourceType, PatternType]


@dataclass(frozen=True, slots=True)
class VersionedAcls:
    """A resource's ACLs and the version of their stored form (`ABSENT`: none stored)."""

    entries: Entries
    version: int = ABSENT


NO_ACLS = VersionedAcls(frozenset())


class AclStorage(Protocol):
    """Where ACLs are kept. Failures are raised as KafkaError with the code to answer."""

    async def read(self, pattern: ResourcePattern) -> VersionedAcls:
        """The stored ACLs of ``pattern`` (`NO_ACLS` when none are)."""
        ...

    async def write(self, pattern: ResourcePattern, entries: Entries, expected: int) -> int | None:
        """Stores ``entries`` (none: removes the resource) if the stored version is still
        ``expected`` (`ABSENT`: nothing stored); the new version, or None when another
        writer changed it first."""
        ...

    async def announce(self, pattern: ResourcePattern) -> None:
        """Tells the other brokers that ``pattern``'s ACLs changed."""
        ...


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users`` ("User:a;User:b") as principals; ConfigError for one without a type."""
    users = set()
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        if principal_parts(item) is None:
            raise ConfigError(
                f"super.users: {item!r} is not a principal of the form Type:name (User:alice)"
            )
        users.add(item)
    return frozenset(users)


class AclAuthorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl: bool = False,
        storage: AclStorage | None = None,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl = allow_everyone_if_no_acl
        self.storage = storage
        # pattern -> its ACLs (only patterns that have some)
        self._acls: dict[ResourcePattern, VersionedAcls] = {}
        # resource type -> prefix -> ACLs of that PREFIXED pattern
        self._prefixed: dict[ResourceType, dict[str, Entries]] = {}
        # (principal, host as given, operation, resource type, name) -> allowed
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        # Kafka's by-resource-type index, built when first needed after a change:
        # (principal, host, operation, permission, resource type, pattern type) -> names
        self._by_type: dict[_TypeKey, set[str]] | None = None
        self._updating: asyncio.Lock | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AclAuthorizer | None:
        """The authorizer ``authorizer.class.name`` asks for; None when it is empty."""
        name = config.get_str("authorizer.class.name")
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise ConfigError(f"authorizer.class.name: {name!r} is not an authorizer kbroker has")
        return cls(
            parse_super_users(config.get_optional_str("super.users")),
            config.get_bool("allow.everyone.if.no.acl.found"),
        )

    @property
    def updating(self) -> asyncio.Lock:
        """Held while ACLs change (here, or as read from storage)."""
        if self._updating is None:
            self._updating = asyncio.Lock()
        return self._updating

    # -- questions ----------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the literal resource."""
        key = (principal, host, operation, resource_type, name)
        decided = self._decisions.get(key)
        if decided is None:
            decided = self._decide(principal, acl_host(host), operation, resource_type, name)
            if len(self._decisions) >= MAX_CACHED_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = decided
        return decided

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The operations of ``resource_type`` allowed on ``name``, as Kafka's bit field."""
        return operations_bitfield(
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name)
        )

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def _matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        found: list[AccessControlEntry] = []
        for exact in (name, WILDCARD_RESOURCE):
            acls = self._acls.get(ResourcePattern(resource_type, exact, PatternType.LITERAL))
            if acls is not None:
                found.extend(acls.entries)
            if name == WILDCARD_RESOURCE:
                break
        prefixes = self._prefixed.get(resource_type)
        if prefixes:
            if len(prefixes) < len(name):
                for prefix, entries in prefixes.items():
                    if name.startswith(prefix):
                        found.extend(entries)
            else:
                for end in range(1, len(name) + 1):
                    hit = prefixes.get(name[:end])
                    if hit is not None:
                        found.extend(hit)
        return found

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        denying = (operation, AclOperation.ALL)
        for e in entries:
            if (
                e.permission is PermissionType.DENY
                and e.operation in denying
                and e.principal in principals
                and e.host in hosts
            ):
                return False
        allowing = allowing_operations(operation)
        return any(
            e.permission is PermissionType.ALLOW
            and e.operation in allowing
            and e.principal in principals
            and e.host in hosts
            for e in entries
        )

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of ``resource_type``
        (Kafka's authorizeByResourceType: an ALLOW on some name that no DENY covers)."""
        if principal in self.super_users:
            return True
        host = acl_host(host)
        index = self._type_index()

        def names(permission: PermissionType, pattern_type: PatternType) -> list[set[str]]:
            found = []
            for p in (principal, WILDCARD_PRINCIPAL):
                for h in (host, WILDCARD_HOST):
                    for o in (operation, AclOperation.ALL):
                        hit = index.get((p, h, o, permission, resource_type, pattern_type))
                        if hit:
                            found.append(hit)
            return found

        deny_literals = names(PermissionType.DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in s for s in deny_literals):
            return False
        if self.allow_everyone_if_no_acl:
            return True
        deny_prefixes = names(PermissionType.DENY, PatternType.PREFIXED)
        allow_literals = names(PermissionType.ALLOW, PatternType.LITERAL)
        allow_prefixes = names(PermissionType.ALLOW, PatternType.PREFIXED)

        def denied_by_prefix(resource: str) -> bool:
            return any(
                resource[:end] in s for end in range(1, len(resource) + 1) for s in deny_prefixes
            )

        if any(not denied_by_prefix(p) for s in allow_prefixes for p in s):
            return True
        return any(
            literal == WILDCARD_RESOURCE
            or (not any(literal in d for d in deny_literals) and not denied_by_prefix(literal))
            for s in allow_literals
            for literal in s
        )

    def _type_index(self) -> dict[_TypeKey, set[str]]:
        if self._by_type is None:
            index: dict[_TypeKey, set[str]] = {}
            for pattern, acls in self._acls.items():
                for e in acls.entries:
                    key = (
                        e.principal,
                        e.host,
                        e.operation,
                        e.permission,
                        pattern.resource_type,
                        pattern.pattern_type,
                    )
                    index.setdefault(key, set()).add(pattern.name)
            self._by_type = index
        return self._by_type

    def acls(self, selected: AclBindingFilter) -> list[AclBinding]:
        """Every ACL the filter matches, ordered by resource then entry."""
        out = []
        for pattern in sorted(self._acls):
            if not selected.pattern.matches(pattern):
                continue
            for entry in sorted(self._acls[pattern].entries):
                if selected.entry.matches(entry):
                    out.append(AclBinding(pattern, entry))
        return out

    def count(self) -> int:
        return sum(len(a.entries) for a in self._acls.values())

    # -- following storage ---------------------------------------------------------------

    def set_resource(self, pattern: ResourcePattern, acls: VersionedAcls) -> None:
        """``pattern``'s ACLs are now ``acls`` (as read from storage, or just written)."""
        if acls.entries:
            self._acls[pattern] = acls
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type is PatternType.PREFIXED:
            table = self._prefixed.setdefault(pattern.resource_type, {})
            if acls.entries:
                table[pattern.name] = acls.entries
            else:
                table.pop(pattern.name, None)
        self._changed()

    def replace_all(self, acls: Mapping[ResourcePattern, VersionedAcls]) -> None:
        """Every ACL, as loaded from storage (those not in ``acls`` are gone)."""
        self._acls = {p: a for p, a in acls.items() if a.entries}
        self._prefixed = {}
        for p, a in self._acls.items():
            if p.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(p.resource_type, {})[p.name] = a.entries
        self._changed()
        log.info("ACLs loaded: %d on %d resource patterns", self.count(), len(self._acls))

    def _changed(self) -> None:
        self._decisions.clear()
        self._by_type = None

    # -- changes made here ------------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[KafkaError | None]:
        """Adds the bindings (CreateAcls): per binding, None or the error that refused it."""
        results: list[KafkaError | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}
        for i, binding in enumerate(bindings):
            refused = creation_error(binding)
            if refused is not None:
                results[i] = KafkaError(*refused)
            else:
                by_pattern.setdefault(binding.pattern, []).append((i, binding.entry))
        async with self.updating:
            for pattern, items in by_pattern.items():
                added = frozenset(entry for _, entry in items)
                try:
                    await self._update(pattern, added.union)
                except KafkaError as exc:
                    for i, _ in items:
                        results[i] = exc
        return results

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter]
    ) -> list[list[tuple[AclBinding, KafkaError | None]]]:
        """Removes what the filters match (DeleteAcls): per filter, each ACL it removed (an
        ACL more than one filter matches is reported under the first) and its error."""
        results: list[dict[AclBinding, KafkaError | None]] = [{} for _ in filters]
        async with self.updating:
            candidates = set(self._acls)
            for f in filters:
                candidates.update(p for p in f.pattern.exact_patterns if storable_name(p.name))
            for pattern in sorted(candidates):
                matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
                if not matching:
                    continue
                removed: dict[AclBinding, int] = {}

                def keep(
                    current: Entries,
                    pattern: ResourcePattern = pattern,
                    matching: list[tuple[int, AclBindingFilter]] = matching,
                    removed: dict[AclBinding, int] = removed,
                ) -> Entries:
                    removed.clear()
                    kept = set()
                    for entry in current:
                        first = next((i for i, f in matching if f.entry.matches(entry)), None)
                        if first is None:
                            kept.add(entry)
                        else:
                            removed[AclBinding(pattern, entry)] = first
                    return frozenset(kept)

                error: KafkaError | None = None
                try:
                    await self._update(pattern, keep)
                except KafkaError as exc:
                    error = exc
                for binding, i in removed.items():
                    results[i][binding] = error
        return [sorted(r.items(), key=lambda item: item[0]) for r in results]

    async def _update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> None:
        """Writes ``change``(current ACLs) as ``pattern``'s ACLs, conditionally on the version
        read (the cached one first), re-reading and retrying when another writer won."""
        storage = self.storage
        if storage is None:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the ACL storage is not open yet")
        current = self._acls.get(pattern) or await storage.read(pattern)
        for _ in range(UPDATE_ATTEMPTS):
            new = change(current.entries)
            version = await storage.write(pattern, new, current.version)
            if version is not None:
                break
            await asyncio.sleep(random.uniform(*RETRY_BACKOFF_S))
            current = await storage.read(pattern)
        else:
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Failed to update ACLs for {pattern} after trying a maximum of "
                f"{UPDATE_ATTEMPTS - 1} times",
            )
        self.set_resource(pattern, VersionedAcls(new, version))
        if new != current.entries:
            log.info("ACLs of %s are now: %s", pattern, "; ".join(map(str, sorted(new))) or "none")
            await storage.announce(pattern)
