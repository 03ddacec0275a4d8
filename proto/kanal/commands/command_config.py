"""Client security settings of the commands: flags, a client config file, and the `kanal dev --tls` cluster's.

Shared by the client commands (kanal.clients.cli) and the server-side tools that dial a cluster (`kanal
metadata`), as dev_state.py is. Every such command takes

    --tls-ca-file FILE      CA certificate(s) the brokers' certificates chain to (PEM): TLS on
    --tls-cert-file FILE    a client certificate (PEM), for listeners that require one (mTLS)
    --tls-key-file FILE     its private key (PEM)
    --tls-server-name NAME  the name the brokers' certificates carry when it is not the host dialled
    --user NAME             authenticate with a user name and password (SCRAM credentials; TLS only)
    --password PASSWORD     the password (visible in `ps`: prefer the config file or the prompt; without it,
                            --user asks for it on the terminal)
    --command-config FILE   a client config file (Kafka's spelling of the flag), below

The client config file is TOML, one `key = value` per setting, keys the flags' names without `--` (the
format of the servers' --config files); relative paths are relative to the file's directory:

    # ~/.kanal/client.toml
    bootstrap = "127.0.0.1:9092"          # optional: used when --bootstrap is not given
    tls-ca-file = "tls/ca.pem"
    tls-cert-file = "tls/client.pem"
    tls-key-file = "tls/client-key.pem"
    user = "alice"
    password = "..."

Precedence, per setting: the flag, then --command-config FILE, then $KANAL_CLIENT_CONFIG, then the config
`kanal dev --tls` wrote for the cluster it runs (named in ~/.kanal/dev.json) when the command talks to that
cluster (for the client commands: no --bootstrap, no $KANAL_BOOTSTRAP; for `kanal metadata`: no
--controller). A key the file does not know, a value that is not a string,
or a file that is not TOML is INVALID_CONFIG in one line.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

CONFIG_ENV = "KANAL_CLIENT_CONFIG"
_PATH_KEYS = ("tls-ca-file", "tls-cert-file", "tls-key-file")
KEYS = (*_PATH_KEYS, "tls-server-name", "user", "password", "bootstrap")


def add_client_security_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "security (or --command-config FILE; see kanal.commands.command_config)"
    )
    group.add_argument(
        "--command-config", metavar="FILE", help="client config file (TOML): TLS files, user, password"
    )
    group.add_argument(
        "--tls-ca-file", metavar="FILE", help="CA certificate(s) of the brokers (PEM): use TLS"
    )
    group.add_argument("--tls-cert-file", metavar="FILE", help="client certificate (PEM), for mTLS")
    group.add_argument("--tls-key-file", metavar="FILE", help="the client certificate's private key (PEM)")
    group.add_argument("--tls-server-name", metavar="NAME", help="name the brokers' certificates carry")
    group.add_argument("--user", help="user name (SCRAM credentials in the cluster; over TLS only)")
    group.add_argument("--password", help="the user's password (default: asked on the terminal)")


def read_config_file(path: Path) -> dict[str, str]:
    """The settings of a client config file, paths made absolute; INVALID_CONFIG (one line) when wrong."""
    try:
        table = tomllib.loads(path.read_text())
    except OSError as exc:
        raise KanalError(
            ErrorCode.INVALID_CONFIG, f"--command-config {path}: cannot read it: {exc.strerror}"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"--command-config {path}: not TOML: {exc}") from None
    out: dict[str, str] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise KanalError(ErrorCode.INVALID_CONFIG,
                             f"--command-config {path}: unknown key {key!r} (keys: {', '.join(KEYS)})")
        if not isinstance(value, str):
            raise KanalError(ErrorCode.INVALID_CONFIG, f"--command-config {path}: {key} must be a string")
        out[key] = str((path.parent / value).resolve()) if key in _PATH_KEYS else value
    return out


def layered_settings(args: argparse.Namespace, environ: Mapping[str, str],
                     dev_state: Mapping[str, object] | None, *, talks_to_dev: bool) -> dict[str, str]:
    """Every setting from the flags over the config files (see the module docstring); `talks_to_dev`: the
    command talks to the running `kanal dev` cluster, whose client config then applies."""
    settings: dict[str, str] = {}
    sources: list[Path] = []
    dev_config = (dev_state or {}).get("client_config")
    if talks_to_dev and isinstance(dev_config, str) and dev_config:
        sources.append(Path(dev_config))
    if environ.get(CONFIG_ENV):
        sources.append(Path(environ[CONFIG_ENV]))
    if getattr(args, "command_config", None):
        sources.append(Path(args.command_config))
    for source in sources:
        settings.update(read_config_file(source))
    for key in KEYS:
        value = getattr(args, key.replace("-", "_"), None)
        if value is not None and key != "bootstrap":
            settings[key] = value
    return settings


def security_from(settings: Mapping[str, str], *, prompt=getpass.getpass, interactive: bool | None = None
                  ) -> ClientSecurity | None:
    """The ClientSecurity the settings describe (None: plaintext). A user without a password asks for it
    on the terminal; INVALID_CONFIG when there is no terminal to ask on."""
    if not any(settings.get(k) for k in KEYS if k != "bootstrap"):
        return None
    password = settings.get("password")
    if settings.get("user") and password is None:
        interactive = sys.stdin.isatty() if interactive is None else interactive
        if not interactive:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"--user {settings['user']}: no --password, no password in "
                "the config file, and no terminal to ask on",
            )
        password = prompt(f"password for {settings['user']}: ")
    return ClientSecurity(ca_file=settings.get("tls-ca-file"), cert_file=settings.get("tls-cert-file"),
                          key_file=settings.get("tls-key-file"), server_name=settings.get("tls-server-name"),
                          user=settings.get("user"), password=password)
