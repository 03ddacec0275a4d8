"""Every `kanal` command with bad arguments and with no cluster to talk to: one error line (or one JSON
object), a documented exit status, never a traceback; every subcommand and option has a help line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

import kanal
from kanal.clients.cli import build_parser
from kanal.clients.producer_config import ProducerConfig, delivery_timeout_covering
from kanal.commands.report import DOCUMENTED_EXITS, EXIT_FAILED, EXIT_INTERNAL, EXIT_USAGE
from kanal.deploy import cli as dispatcher
from kanal.deploy.completion import full_parser

# what a command needs besides its positionals to get as far as connecting
_EXTRA = {("groups", "reset-offsets"): ["--topic", "t", "--to-earliest"],
          ("configs",): ["--topic", "t"],
          ("users", "create"): ["--user-password", "pw"],
          ("acls", "add"): ["--topic", "t", "--allow-principal", "User:a", "--operation", "Read"],
          ("acls", "remove"): ["--topic", "t"],
          ("reassign", "generate"): ["--brokers", "0,1", "--topics", "t"],
          ("reassign", "balance"): ["--brokers", "0,1"],
          ("reassign", "execute"): ["--plan", "{plan}"],
          ("reassign", "verify"): ["--plan", "{plan}"],
          ("reassign", "cancel"): ["--plan", "{plan}"],
          ("leaders", "elect"): ["--preferred"],
          ("brokers", "unregister"): ["--id", "1"],
          ("brokers", "safe-to-stop"): ["--id", "1"],
          ("quorum", "add"): ["--id", "4", "--raft", "127.0.0.1:9704", "--grpc", "127.0.0.1:9604"],
          ("quorum", "remove"): ["--id", "3"]}
# A well-formed plan (kafka-reassign-partitions' JSON) for the commands that read one before they ask the
# cluster.
PLAN_JSON = '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [0, 1]}]}'



def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    children = _subparsers(parser)
    if not children:
        yield path, parser
    for name, child in children.items():
        yield from _leaves(child, (*path, name))


CLIENT_COMMANDS = list(_leaves(build_parser()))


def _minimal_args(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    positionals = [a for a in parser._actions if not a.option_strings and a.nargs is None]
    default = ["t"] if path == ("groups", "describe") else []
    extra = [a.replace("{plan}", "plan.json") for a in _EXTRA.get(path, default)]
    return [*path, *["t" for _ in positionals], *extra]


@pytest.fixture
def no_cluster(tmp_path, monkeypatch):
    (tmp_path / "plan.json").write_text(PLAN_JSON)
    monkeypatch.chdir(tmp_path)  # "{plan}" in an argv names tmp_path/plan.json
    monkeypatch.setenv("KANAL_HOME", str(tmp_path))  # no dev.json there
    monkeypatch.delenv("KANAL_BOOTSTRAP", raising=False)
    monkeypatch.delenv("KANAL_DEBUG", raising=False)


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        status = dispatcher.main(argv)
    except SystemExit as exc:  # argparse ends usage errors and --help with SystemExit
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out, (argv, err)
    assert status in DOCUMENTED_EXITS and status != EXIT_INTERNAL, (argv, status, err)  # a bug, in one line
    return status, out, err


@pytest.mark.parametrize("path,parser", CLIENT_COMMANDS, ids=[" ".join(p) for p, _ in CLIENT_COMMANDS])
def test_client_command_without_a_cluster_says_no_cluster(path, parser, no_cluster, capsys):
    argv = _minimal_args(path, parser)
    status, _, err = run(argv, capsys)
    assert status == EXIT_FAILED and len(err.strip().splitlines()) == 1, (argv, err)
    assert err.startswith("kanal: NO_CLUSTER: no cluster to talk to"), err
    status, _, err = run([*argv, "--output", "json"], capsys)
    error = json.loads(err)
    assert status == EXIT_FAILED and error["error"]["name"] == "NO_CLUSTER" and error["error"]["code"] == 81
    assert error["exit"] == 1 and "no cluster" in error["error"]["message"]


def test_output_may_come_before_the_command(no_cluster, capsys):
    """`kanal --output json COMMAND ...` is `kanal COMMAND ... --output json` (the usage line lists --output
    among every command's flags)."""
    status, _, err = run(["--output", "json", "topics", "list"], capsys)
    assert status == EXIT_FAILED and json.loads(err)["error"]["name"] == "NO_CLUSTER"
    status, out, _ = run(["--output=json", "chaos", "schedule", "--duration", "20s"], capsys)
    assert status == 0 and all(json.loads(line)["kind"] for line in out.splitlines())


ALL_COMMANDS = [*(p for p, _ in CLIENT_COMMANDS), *((name,) for name in dispatcher.SUBCOMMANDS
                                                   if name not in _subparsers(build_parser()))]


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=[" ".join(p) for p in ALL_COMMANDS])
def test_every_command_with_a_bad_flag_is_a_usage_error(path, no_cluster, capsys):
    status, _, err = run([*path, "--no-such-flag"], capsys)
    assert status == EXIT_USAGE and "Traceback" not in err and err.strip(), err
    status, _, err = run([*path, "--no-such-flag", "--output", "json"], capsys)
    assert status == EXIT_USAGE and json.loads(err)["exit"] == EXIT_USAGE, err


@pytest.mark.parametrize("argv,code", [
    (["quotas", "--entity-type", "user", "--set", "producer_byte_rate=abc"], "INVALID_QUOTA"),
    (["consume", "t", "--from-timestamp", "yesterday"], "NO_CLUSTER"),
    (["consume", "t", "--format", "%z"], "NO_CLUSTER"),
    (["topics", "create", "t", "--config", "novalue"], "NO_CLUSTER"),
    (["groups", "describe"], "INVALID_REQUEST"),
    (["groups", "describe", "g", "--all-groups"], "INVALID_REQUEST"),
])
def test_bad_values_are_one_line_errors(argv, code, no_cluster, capsys):
    status, _, err = run(argv, capsys)
    assert status == EXIT_FAILED and err.startswith(f"kanal: {code}: "), err


@pytest.mark.parametrize(
    "argv",
    [
        ["broker", "--log-level", "bogus"],
        ["controller", "--log-level", "bogus"],
        ["consume", "t", "--offset", "x"],
        ["perf", "produce", "t", "--num-records", "0"],
        ["nosuch"],
        ["configs"],
        ["topics"],
        [],
    ],
)
def test_bad_arguments_exit_2_without_a_traceback(argv, no_cluster, capsys):
    status, _, err = run(argv, capsys)
    assert status == EXIT_USAGE and err.strip(), err


def test_a_missing_extra_is_named_in_one_line(no_cluster, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the spark extra were not installed
    for command in ("audit", "analytics"):
        status, _, err = run([command], capsys)
        assert status == EXIT_FAILED and err.startswith("kanal: MISSING_DEPENDENCY: ") and "pyspark" in err, (
            err
        )
        assert len(err.strip().splitlines()) == 1


def test_every_subcommand_and_option_has_a_help_line():
    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                missing.extend(f"{path} {name}" for name in action.choices if name not in helped)
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif not action.help and action.dest != "help":
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(full_parser(), "kanal")
    assert not missing, missing
    assert "--output json" in dispatcher.usage() and "json" in build_parser()._subparsers._group_actions[0] \
        .choices["topics"]._subparsers._group_actions[0].choices["list"].format_help()


def test_version_python_dash_m_and_completion(tmp_path):
    env = dict(os.environ, KANAL_HOME=str(tmp_path))
    version = subprocess.run([sys.executable, "-m", "kanal", "--version"], check=False, capture_output=True,
                             text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"kanal {kanal.__version__}"
    script = subprocess.run([sys.executable, "-m", "kanal", "completion", "bash"], check=False,
                            capture_output=True, text=True, env=env, timeout=60)
    assert script.returncode == 0, script.stderr
    for word in ("topics", "reset-offsets", "--under-replicated-partitions", "dump-log", "--print-data"):
        assert word in script.stdout, word
    as_json = subprocess.run([sys.executable, "-m", "kanal", "completion", "bash", "--output", "json"],
                             check=False, capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(as_json.stdout) == {"shell": "bash", "script": script.stdout.rstrip("\n")}
    unknown = subprocess.run([sys.executable, "-m", "kanal", "topics", "list", "--output", "json"],
                             check=False, capture_output=True, text=True, env=env, timeout=60)
    assert unknown.returncode == 1 and json.loads(unknown.stderr)["error"]["name"] == "NO_CLUSTER"


def test_an_internal_error_is_one_line_with_its_own_exit_status(no_cluster, capsys, monkeypatch):
    from kanal.clients import cli

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "topics_list", broken)
    assert dispatcher.main(["topics", "list"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert (
        err.startswith("kanal: UNKNOWN_SERVER_ERROR: internal error RuntimeError: boom")
        and "Traceback" not in err
    )
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setenv("KANAL_DEBUG", "1")
    assert dispatcher.main(["topics", "list", "--output", "json"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and json.loads(err.strip().splitlines()[-1])["exit"] == EXIT_INTERNAL


@pytest.mark.parametrize("argv,status,name", [
    (["metadata", "ls", "/"], EXIT_FAILED, "INVALID_REQUEST"),
    (["dev", "status"], EXIT_FAILED, "NO_CLUSTER"),
    (["dev", "restart", "broker-1"], EXIT_FAILED, "NO_CLUSTER"),
    (["dump-log", "/no/such/partition-0"], EXIT_USAGE, "INVALID_REQUEST"),
    (["audit"], EXIT_USAGE, "INVALID_REQUEST"),  # no `kanal dev` data to read
    (["analytics"], EXIT_USAGE, "INVALID_REQUEST"),
])
def test_other_commands_without_a_cluster(argv, status, name, no_cluster, capsys):
    got, _, err = run(argv, capsys)
    assert got == status and len(err.strip().splitlines()) == 1 and err.startswith(f"kanal {argv[0]}"), err
    got, _, err = run([*argv, "--output", "json"], capsys)
    assert got == status and json.loads(err)["error"]["name"] == name, err


def test_a_dev_json_left_by_a_killed_kanal_dev_is_no_cluster(no_cluster, tmp_path, capsys):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    dead_pid = int(gone.stdout)  # that process has exited: nothing answers at the bootstrap below
    (tmp_path / "dev.json").write_text(json.dumps({"pid": dead_pid, "bootstrap": "127.0.0.1:9"}))
    status, _, err = run(["topics", "list"], capsys)
    assert status == EXIT_FAILED and err.startswith("kanal: NO_CLUSTER: "), err


def test_every_client_command_takes_a_request_timeout():
    """--request-timeout-ms on every client command (what its Admin, producer and consumer calls may
    take), Kafka's 30 s by default; and the producer's delivery timeout grows to cover a longer one."""
    for path, parser in CLIENT_COMMANDS:
        argv = _minimal_args(path, parser)
        assert build_parser().parse_args(argv).request_timeout_ms == 30_000, path
        longer = build_parser().parse_args([*argv, "--request-timeout-ms", "150000"])
        assert longer.request_timeout_ms == 150_000, path
    assert (delivery_timeout_covering(150_000, 5), delivery_timeout_covering(2_000, 5)) == (150_005, 120_000)
    ProducerConfig("127.0.0.1:9092", request_timeout_ms=600_000, linger_ms=60_000,
                   delivery_timeout_ms=delivery_timeout_covering(600_000, 60_000))  # valid at the bounds
