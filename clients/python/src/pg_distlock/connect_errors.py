"""What a failed connect means: a conninfo that cannot work (Misconfigured,
raised at once) or a server that cannot serve now (Unavailable, retried).

libpq reports a failed connect with no SQLSTATE, so its words decide (in
English unless the server's lc_messages says otherwise: an unmatched
refusal is retried, as every refusal was before)."""

from __future__ import annotations

import psycopg

from .errors import DistlockError, Misconfigured, Unavailable

# Refused in words that mean a wrong conninfo, role or server setup before
# a first success, and once connections have succeeded as likely a passing
# state an operator will undo: the database or role does not exist (a
# restore), no pg_hba.conf entry (a maintenance swap), the role may not log
# in or connect to the database (a drain made it NOLOGIN or revoked
# CONNECT), the conninfo gives no password where one is asked for, it
# requires what the server does not offer (SSL, GSSAPI encryption, which
# also fails while a Kerberos ticket awaits renewal, channel binding), or
# the password is wrong (or the LDAP or RADIUS server behind it is down,
# which libpq reports in the same words).
_REFUSED_BEFORE_A_SUCCESS = ("does not exist", "no pg_hba.conf entry", "is not permitted to log in",
                             "permission denied for database", "no password supplied", "but SSL was required",
                             "GSSAPI encryption required", "GSSAPI encryption, but it was required",
                             "channel binding required", "channel binding is required", "authentication failed")
# No server answered where the conninfo points: a wrong host or port, or,
# once connections have succeeded, a server that is down.
_NO_SERVER = ("Connection refused", "could not translate host name", "No route to host",
              "Network is unreachable", "No such file or directory",
              "failed to resolve host")  # psycopg's words: it resolves host names itself (3.2+)
# A conninfo whose lists do not match (psycopg's words, before libpq reads
# it): wrong at every try, and its words quote no value.
_MISMATCHED_LISTS = ("could not match",)
# Everything else (starting up, shutting down, too many clients, a
# read-only server for target_session_attrs, a connect timeout) is "not
# now", before and after a first success.


def shown_conninfo(conninfo: str) -> str:
    """`conninfo` as an error may show it: its keywords without the secret
    ones (those libpq marks as secret or debug: password, sslpassword, ...)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "(a malformed conninfo)"
    hidden = _secret_keywords()
    shown = {k: v for k, v in params.items() if k not in hidden and v is not None}
    return make_conninfo("", **shown) or "(the PG* environment variables)"


def _secret_keywords() -> set[str]:
    keywords = {"password"}
    try:
        for option in psycopg.pq.Conninfo.get_defaults():
            if option.dispchar in (b"*", b"D"):
                keywords.add(option.keyword.decode())
    except psycopg.Error:
        pass
    return keywords


def _parses(conninfo: str) -> bool:
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error:
        return False
    return True


def connect_failure(exc: psycopg.Error, conninfo: str, connected_before: bool) -> DistlockError:
    """What a failed connect with `conninfo` raises, the psycopg error as
    its cause: Misconfigured when retrying cannot help, else Unavailable."""
    where = shown_conninfo(conninfo)
    if not _parses(conninfo):
        # libpq's words quote the token it could not read, maybe a password.
        err: DistlockError = Misconfigured(
            "cannot connect: the conninfo is malformed (libpq's error is this one's cause; it is not shown "
            "here because it may quote a password)")
        err.__cause__ = exc
        return err
    cause = str(exc).strip().replace("\n", " ")
    if any(words in cause for words in _MISMATCHED_LISTS):
        err = Misconfigured(f"cannot connect: the conninfo is malformed: {cause}")
        err.__cause__ = exc
        return err
    refused = any(words in cause for words in _REFUSED_BEFORE_A_SUCCESS)
    no_server = any(words in cause for words in _NO_SERVER)
    if not connected_before and (refused or no_server):
        check = ("check the conninfo's host and port, and that the server is running" if no_server
                 else "check the conninfo's user, password, dbname and sslmode, and the server's pg_hba.conf"
                      " and the role's CONNECT privilege")
        err = Misconfigured(f"cannot connect to {where}: {cause} ({check})")
    else:
        err = Unavailable(f"cannot connect to {where}: {cause}")
    err.__cause__ = exc
    return err
