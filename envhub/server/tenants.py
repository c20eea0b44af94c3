"""Tenants: who is calling (a bearer token, or the name on a client certificate) and what they may hold.

A server runs in one of three modes, chosen by its configuration:

* open: no token, no tenants file: every caller is the tenant `default` (a client certificate,
  when `--tls-client-ca` asks for one, is the only check);
* shared token (`--token-file`): a caller with the token is `default`, others are refused;
* tenants file (`--tenants-file`, YAML, reloaded on SIGHUP):

      tenants:
        team-a:
          tokens: [s3cret-a, s3cret-a-next]   # bearer tokens (several: rotate without a gap)
          certificates: [trainer-a]           # client-certificate names (subject CN or a DNS SAN)
          max_sessions: 128                   # this tenant's live sessions (default: no quota)
        team-b:
          tokens: [s3cret-b]

A caller is identified by its `authorization: Bearer` token when it sends one (a wrong token is
refused even with a good certificate), else by its verified certificate's names. Tokens are kept
as SHA-256 digests, so looking one up does not time the comparison of secrets.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)
DEFAULT = "default"
"""The tenant of every caller of a server without a tenants file."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_KEYS = frozenset({"tokens", "certificates", "max_sessions"})


@dataclass(frozen=True)
class Tenant:
    """One tenant: its name (in session ownership, errors and metrics labels) and its quota."""

    name: str
    max_sessions: int | None = None
    """Most live sessions this tenant may hold on this server (None: only the server's --max-sessions)."""


def _digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


@dataclass(frozen=True)
class Directory:
    """Credentials -> tenants. `open`: no credentials are checked, every caller is `default`."""

    tokens: Mapping[bytes, Tenant] = field(default_factory=dict)
    """SHA-256 of a bearer token -> its tenant."""
    certificates: Mapping[str, Tenant] = field(default_factory=dict)
    """A client certificate's name (CN or DNS SAN) -> its tenant."""
    open: bool = False
    tenants: tuple[Tenant, ...] = ()
    """Every tenant named (for metrics)."""

    @classmethod
    def anyone(cls) -> Directory:
        return cls(open=True, tenants=(Tenant(DEFAULT),))

    @classmethod
    def shared_token(cls, token: str) -> Directory:
        tenant = Tenant(DEFAULT)
        return cls(tokens={_digest(token): tenant}, tenants=(tenant,))

    def identify(self, token: bytes | None, names: Iterable[str]) -> Tenant | None:
        """The tenant of a caller sending bearer `token` (None: no authorization metadata) and holding a
        verified certificate with `names`; None when they name none."""
        if self.open:
            return self.tenants[0]
        if token is not None:
            return self.tokens.get(_digest(token))
        for name in names:
            tenant = self.certificates.get(name)
            if tenant is not None:
                return tenant
        return None


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"{where} must be a list of non-empty strings")
    return value


def _tenant(name: Any, entry: Any) -> tuple[Tenant, list[str], list[str]]:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"tenant name {name!r} must be 1-63 letters, digits, '.', '_' or '-' (starting alphanumeric)")
    if not isinstance(entry, dict):
        raise ValueError(f"tenant {name!r} must be a mapping with tokens, certificates and max_sessions")
    stray = sorted(set(entry) - _KEYS)
    if stray:
        raise ValueError(f"tenant {name!r} has unknown key(s) {stray}; known: {sorted(_KEYS)}")
    quota = entry.get("max_sessions")
    if quota is not None and (isinstance(quota, bool) or not isinstance(quota, int) or quota < 1):
        raise ValueError(f"tenant {name!r}: max_sessions must be a whole number of at least 1, not {quota!r}")
    tokens = _strings(entry.get("tokens", []), f"tenant {name!r}: tokens")
    certificates = _strings(entry.get("certificates", []), f"tenant {name!r}: certificates")
    if not tokens and not certificates:
        raise ValueError(f"tenant {name!r} has neither tokens nor certificates: nobody could act as it")
    return Tenant(name, quota), tokens, certificates


def parse(document: Any) -> Directory:
    """The directory of a tenants document (the YAML above); ValueError names what is wrong."""
    if not isinstance(document, dict) or set(document) != {"tenants"} or not isinstance(document["tenants"], dict):
        raise ValueError("a tenants file is a mapping with one key, `tenants: {NAME: {tokens: [...], ...}}`")
    tokens: dict[bytes, Tenant] = {}
    certificates: dict[str, Tenant] = {}
    tenants = []
    for name, entry in document["tenants"].items():
        tenant, its_tokens, its_certificates = _tenant(name, entry)
        tenants.append(tenant)
        for token in its_tokens:
            if tokens.setdefault(_digest(token), tenant) is not tenant:
                raise ValueError(f"a token of tenant {name!r} is also another tenant's (tokens must be unique)")
        for certificate in its_certificates:
            if certificates.setdefault(certificate, tenant) is not tenant:
                raise ValueError(f"certificate name {certificate!r} is listed by two tenants")
    if not tenants:
        raise ValueError("the tenants file names no tenant")
    return Directory(tokens, certificates, open=False, tenants=tuple(tenants))


def load(path: str | Path) -> Directory:
    """The directory of the tenants file at `path`; ValueError names the file and what is wrong."""
    try:
        return parse(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise ValueError(f"tenants file {path}: {error}") from error


class Tenants:
    """The directory in force; `reload()` reads the tenants file again (SIGHUP)."""

    def __init__(self, directory: Directory, path: str | None = None) -> None:
        self.directory = directory
        self.path = path

    @classmethod
    def configured(cls, tenants_file: str | None, token: str | None) -> Tenants:
        """From the server's settings: a tenants file, else a shared token, else open."""
        if tenants_file:
            return cls(load(tenants_file), tenants_file)
        return cls(Directory.shared_token(token) if token else Directory.anyone())

    @property
    def open(self) -> bool:
        return self.directory.open

    def reload(self) -> bool:
        """Read the tenants file again; on an error keep the directory in force (and log why)."""
        if self.path is None:
            return False
        try:
            self.directory = load(self.path)
        except ValueError as error:
            log.error("tenants not reloaded, the previous ones stay in force: %s", error)
            return False
        log.info("tenants reloaded from %s: %s", self.path, ", ".join(t.name for t in self.directory.tenants))
        return True
