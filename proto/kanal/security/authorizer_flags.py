"""The authorizer's flags, the same on `kanal broker` and `kanal controller` (like server_flags.py, also
KANAL_* variables and --config keys):

    --authorizer on|off                    check every call against the ACLs (default off: allow all)
    --super-users "User:a;User:broker-1"   Kafka's super.users: principals allowed everything
    --allow-everyone-if-no-acl-found       a resource without any ACL is open to all (default: denied)

The servers turn them into kanal.metadata.authorizer.AuthorizerConfig (`authorizer_config_from`).
"""

from __future__ import annotations

import argparse

AUTHORIZER_MODES = ("off", "on")


def add_authorizer_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--authorizer", choices=AUTHORIZER_MODES, default="off",
                        help="check every call against the ACLs in the metadata log (default off: everything "
                             "is allowed)")
    parser.add_argument("--super-users", default="",
                        help="semicolon-separated principals allowed everything, as Kafka's super.users "
                             "(e.g. 'User:admin;User:broker-1')")
    parser.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                        help="with --authorizer on: a resource that has no ACL at all is open to everyone "
                             "(default: denied)")
