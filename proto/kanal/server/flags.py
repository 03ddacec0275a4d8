"""Server flags from three places — the command line, `KANAL_…` environment variables and a config file —
shared by `kanal controller` and `kanal broker` (both may import kanal.v1; neither may import the other).

Precedence, highest first: a flag on the command line, then the environment, then the config file, then
the flag's default. Every flag `--some-flag` of the command has:

    environment   KANAL_SOME_FLAG=value           (dashes become underscores, upper case)
    config file   some-flag = value               (TOML, the flag's name without the leading dashes)

The config file (`--config FILE`, or `KANAL_CONFIG=FILE`) is TOML: one `key = value` per setting at the top
level, integers for integer flags, strings for the rest, `true`/`false` for switches:

    # /etc/kanal/broker.toml
    controllers = "kanal-controller-0.kanal-controller:9091,kanal-controller-1.kanal-controller:9091"
    listen = "0.0.0.0:9092"
    heartbeat-interval-ms = 1000
    id-from-hostname = true

A key the command does not know, a value of the wrong type, or a file that is not TOML stops the process
before anything starts, with one line naming the file and the key. The environment is shared with other
tools (KANAL_HOME, KANAL_BOOTSTRAP, ...), so only the variables that name one of the command's flags are
read; a switch there is `true`/`false` (also 1/0, yes/no). `--id-from-hostname` takes the id from the
trailing ordinal of $HOSTNAME (or the host name when it is unset): `kanal-broker-2` is 2, the way a
StatefulSet names its pods.

Values are checked by the command's own converters and then by its typed config (ControllerConfig,
BrokerConfig), which names the flag in its one-line message whichever place the value came from.
"""

from __future__ import annotations

import argparse
import re
import socket
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

from kanal.v1.error import ConfigError

# The gRPC health service name a liveness probe asks: SERVING as soon as the node's gRPC server runs and for
# as long as it answers, whether or not the node has caught up (readiness asks "", SERVING only then).
LIVENESS_SERVICE = "kanal.liveness"
ENV_PREFIX = "KANAL_"
CONFIG_ENV = "KANAL_CONFIG"
# Flags that are not settings: where the settings are, and argparse's own.
_NOT_SETTINGS = {"help", "config"}
_ORDINAL = re.compile(r"-(\d{1,9})$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


# A setting is unknown, of the wrong type or out of bounds, wherever it came from: the one ConfigError.
ServerFlagError = ConfigError


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises ServerFlagError instead of printing its usage and exiting, so that a bad flag
    is one line on stderr and the command chooses its exit status."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ServerFlagError(message)


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """The flags both server commands share: where settings come from, log format, id from the host name,
    and how long an advertised name may take to resolve (a new pod's DNS record can lag its start)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of settings (keys: flag names without --); flags and KANAL_* variables override it",
    )
    # --output is the same flag under the name every kanal command takes: a server prints logs, not data.
    parser.add_argument("--log-format", "--output", dest="log_format", choices=("text", "json"),
                        default="text",
                        help="stdout log lines: text, or one JSON object per line (errors then one JSON "
                        "object on stderr)")
    parser.add_argument("--id-from-hostname", action="store_true",
                        help="take --id from the trailing ordinal of $HOSTNAME (a StatefulSet pod's name)")
    parser.add_argument(
        "--resolve-wait-ms-max",
        type=integer("--resolve-wait-ms-max"),
        default=30_000,
        help="wait at most this long for this node's advertised names to resolve (default 30000)",
    )


def parse_layered(parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str],
                  hostname: str) -> argparse.Namespace:
    """Parse `argv` with the environment and the config file beneath it; ServerFlagError (one line) when
    anything is wrong. `hostname` is used only by --id-from-hostname. The parser is used up: its defaults
    become the layered values (build a new one per call)."""
    settings = _settings(parser)
    config_path = _config_path(argv, environ)
    layered: dict[str, object] = {}
    if config_path is not None:
        layered.update(_from_file(config_path, settings))
    layered.update(_from_environ(environ, settings))
    for dest in layered:
        settings[dest].required = False  # supplied, just not on the command line
    parser.set_defaults(**layered)
    args = parser.parse_args(list(argv))
    if getattr(args, "id_from_hostname", False):
        if args.id is not None:
            raise ServerFlagError("give --id or --id-from-hostname, not both")
        args.id = ordinal_of(hostname)
    elif "id" in settings and args.id is None:
        raise ServerFlagError("one of --id or --id-from-hostname is required")
    return args


def ordinal_of(hostname: str) -> int:
    """The StatefulSet ordinal at the end of a pod's name: `kanal-broker-2` -> 2."""
    match = _ORDINAL.search(hostname.split(".")[0])
    if match is None:
        raise ServerFlagError(f"--id-from-hostname: host name {hostname!r} does not end in -ORDINAL")
    return int(match.group(1))


def hostname_from(environ: Mapping[str, str]) -> str:
    """$HOSTNAME when set (Kubernetes sets it to the pod's name; a container test can set it too), else the
    machine's host name."""
    return environ.get("HOSTNAME") or socket.gethostname()


def check_resolves(
    what: str, host: str, wait_ms_max: int, *, sleep=time.sleep, monotonic=time.monotonic
) -> None:
    """ServerFlagError unless `host` resolves within `wait_ms_max`: a node must never advertise a name
    nobody can reach (it would register, then fail every client and peer that dials it)."""
    deadline = monotonic() + wait_ms_max / 1000
    while True:
        try:
            socket.getaddrinfo(host.strip("[]"), None)
            return
        except (socket.gaierror, UnicodeError) as exc:
            if monotonic() >= deadline:
                raise ServerFlagError(f"{what}: {host!r} does not resolve ({exc}) after "
                                      f"{wait_ms_max} ms") from None
        sleep(0.2)


def env_name(dest: str) -> str:
    return ENV_PREFIX + dest.upper()


def file_key(action: argparse.Action) -> str:
    return _long_option(action)[2:]


# -- internals -------------------------------------------------------------------------------------------


def _settings(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest not in _NOT_SETTINGS}


def _long_option(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))


def _config_path(argv: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "--config":
            if i + 1 >= len(argv):
                raise ServerFlagError("--config: expected a FILE")
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return Path(environ[CONFIG_ENV]) if environ.get(CONFIG_ENV) else None


def _from_file(path: Path, settings: Mapping[str, argparse.Action]) -> dict[str, object]:
    try:
        table = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ServerFlagError(f"--config {path}: cannot read it: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ServerFlagError(f"--config {path}: not TOML: {exc}") from None
    by_key = {file_key(a): a for a in settings.values()}
    out: dict[str, object] = {}
    for key, value in table.items():
        action = by_key.get(key)
        if action is None:
            raise ServerFlagError(
                f"--config {path}: unknown key {key!r} (keys are the command's flags without "
                f"'--', e.g. {next(iter(by_key), 'listen')!r})"
            )
        out[action.dest] = _typed(action, value, f"--config {path}: {key}")
    return out


def _from_environ(environ: Mapping[str, str], settings: Mapping[str, argparse.Action]) -> dict[str, object]:
    out: dict[str, object] = {}
    for dest, action in settings.items():
        name = env_name(dest)
        if name in environ:
            out[dest] = _typed(action, environ[name], name)
    return out


def _typed(action: argparse.Action, value: object, where: str) -> object:
    """The value converted as the command line would convert it; ServerFlagError naming `where`."""
    switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
    if switch:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ServerFlagError(f"{where}: expected true or false, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ServerFlagError(f"{where}: expected {_kind(action)}, got {value!r}")
    if isinstance(value, int) and action.type is None:
        raise ServerFlagError(f"{where}: expected a string, got {value!r}")
    text = str(value)
    if action.choices is not None and text not in action.choices:
        raise ServerFlagError(f"{where}: expected one of {', '.join(map(str, action.choices))}, got {text!r}")
    if action.type is None:
        return text
    convert = action.type
    if not callable(convert):  # argparse also allows a registered type's name; kanal's flags never use one
        raise ServerFlagError(f"{where}: flag type {convert!r} is not a converter")
    try:
        return convert(text)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        raise ServerFlagError(f"{where}: expected {_kind(action)}, got {value!r}") from None


def _kind(action: argparse.Action) -> str:
    name = getattr(action.type, "__name__", "")
    return "an integer" if name in ("int", "integer") else "a string"


def integer(flag: str):
    """An argparse `type` for integer flags whose error names the flag."""

    def convert(text: str) -> int:
        try:
            return int(text, 10)
        except ValueError:
            raise ServerFlagError(f"{flag}: expected an integer, got {text!r}") from None

    convert.__name__ = "integer"
    return convert

