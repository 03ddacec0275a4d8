"""`kanal mirror`'s configuration (config.py): flows from a TOML file, and clear errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanal.deploy.mirror.config import ClusterConfig, FlowConfig, load_config
from kanal.deploy.mirror.main import flows_from, main, parser


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mirror.toml"
    path.write_text(text)
    return path


def test_a_file_with_two_flows_and_a_kafka_source(tmp_path):
    (tmp_path / "east.properties").write_text("security.protocol=PLAINTEXT\n")
    flows = load_config(write(tmp_path, """
[clusters.east]
bootstrap = "127.0.0.1:9092"
kind = "kafka"
command-config = "east.properties"
[clusters.west]
bootstrap = "127.0.0.1:9093"
[clusters.north]
bootstrap = "127.0.0.1:9094"

[[flows]]
source = "east"
target = "west"
topics = "orders|payments"
replication-policy = "identity"
commit-interval-ms = 20
sync-topic-acls = false

[[flows]]
source = "west"
target = "north"
"""))
    assert [f.name for f in flows] == ["east->west", "west->north"]
    east_west, west_north = flows
    assert east_west.source.kind == "kafka"
    assert east_west.source.command_config == tmp_path / "east.properties"
    assert east_west.policy.remote_topic("orders") == "orders" and east_west.commit_interval_ms == 20
    assert not east_west.sync_topic_acls and east_west.topics_pattern.fullmatch("payments")
    assert west_north.policy.remote_topic("orders") == "west.orders" and west_north.id == "west-to-north"


TWO = "[clusters.a]\nbootstrap = 'x:1'\n[clusters.b]\nbootstrap = 'y:1'\n"
A_TO_B = TWO + "[[flows]]\nsource = 'a'\ntarget = 'b'\n"


@pytest.mark.parametrize(("text", "message"), [
    ("", "no \\[\\[flows\\]\\]"),
    ("[clusters.a]\nbootstrap = 'x:1'\n[[flows]]\nsource = 'a'\ntarget = 'b'\n", "must name clusters"),
    (A_TO_B + "topics = '('\n", "topics '\\(':"),
    (A_TO_B + "commit-interval-ms = 0\n", "commit-interval-ms 0 is outside"),
    (A_TO_B + "commit-interval-ms = '5'\n", "'5': must be an integer"),
    (A_TO_B + "speed = 1\n", "unknown keys \\['speed'\\]"),
    (TWO.replace("'x:1'", "'x:1'\nkind = 'kafka'") + "[[flows]]\nsource = 'b'\ntarget = 'a'\n",
     "the target must be a kanal cluster"),
    (A_TO_B + "replication-policy = 'mirror'\n", "replication-policy 'mirror'"),
    ("[clusters.a]\nbootstrap = 'x:1'\n[[flows]]\nsource = 'a'\ntarget = 'a'\n", "must differ"),
    ("[clusters.'a.b']\nbootstrap = 'x:1'\n", "cluster alias 'a.b'"),
    ("[clusters.a]\nbootstrap = 'x:1'\ncommand-config = 'nope.toml'\n", "is not a file"),
    ("[other]\n", "unknown sections"),
    ("not toml [", "mirror.toml"),
])
def test_a_bad_file_is_refused_naming_what_is_wrong(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_config(write(tmp_path, text))


def test_flags_give_one_flow_and_refuse_half_a_flow():
    args = parser().parse_args(["run", "--source", "east=127.0.0.1:1", "--target", "west=127.0.0.1:2",
                                "--topics", "t.*", "--replication-policy", "identity",
                                "--no-sync-group-offsets", "--offset-lag-max", "7"])
    (flow,) = flows_from(args)
    assert flow == FlowConfig(ClusterConfig("east", "127.0.0.1:1"), ClusterConfig("west", "127.0.0.1:2"),
                              topics="t.*", replication_policy="identity", sync_group_offsets=False,
                              offset_lag_max=7)
    with pytest.raises(ValueError, match="--target"):
        flows_from(parser().parse_args(["status", "--source", "east=127.0.0.1:1"]))
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--source", "127.0.0.1:1"])  # no alias


def test_a_bad_client_config_stops_the_command_before_anything_starts(tmp_path, capsys):
    bad = tmp_path / "client.toml"
    bad.write_text("colour = 'blue'\n")
    status = main(["run", "--source", "east=127.0.0.1:1", "--target", "west=127.0.0.1:2",
                   "--target-command-config", str(bad)])
    assert status == 2 and "colour" in capsys.readouterr().err
    properties = tmp_path / "east.properties"
    properties.write_text("security.protocol\n")
    status = main(["status", "--source", "east=127.0.0.1:1", "--source-kind", "kafka",
                   "--source-command-config", str(properties), "--target", "west=127.0.0.1:2"])
    assert status == 2 and "line 1" in capsys.readouterr().err
