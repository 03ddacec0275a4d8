"""kanal.security: TLS, authentication and principals, shared by clients and servers (Kafka keeps the
same in clients' common.security).

    channel_security   the one place gRPC channels to kanal servers are made: plaintext, TLS, mTLS, and a
                       user name and password in the call metadata (ClientSecurity)
    listener_security  how a server's listener is secured (ListenerSecurity) and the flags that set it
    authentication     the door of every listener: a call's principal from its certificate or password
    crl                the certificate revocation list of --tls-crl-file: revoked serials, signature checked
    scram              SCRAM credentials: pure derivations (the metadata log stores them)
    principal          who a call comes from; the seam between authentication and authorization
    principal_mapping  a certificate subject → a principal name (ssl.principal.mapping.rules)
    call_identity      the calling host and a forwarded call's original principal
    authorizer_flags   the authorizer's flags, the same on brokers and controllers

Imports kanal.v1, kanal.net and kanal.server's error boundary (the door answers refusals through it).
Importing the package imports none of its modules: `kanal.security.scram` alone loads no gRPC or TLS code.
"""
