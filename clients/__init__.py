"""kanal.clients: the Python producer, consumer and admin clients, and the `kanal` client commands.

`ClientSecurity` (TLS, mTLS, a user and password) is re-exported here, the name client code imports:
`from kanal.clients import ClientSecurity`.
"""

from kanal.security.channel_security import ClientSecurity

__all__ = ["ClientSecurity"]
