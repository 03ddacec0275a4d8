"""kanal.server: what every kanal server process (broker and controller) shares, and no client needs.

    flags            server flags from the command line, KANAL_* variables and a config file
    logs             log lines on stdout, text or JSON
    metrics_endpoint the Prometheus endpoint (an HTTP server) and its flag
    reflection       gRPC server reflection, v1 and v1alpha
    error_boundary   the one place a handler's exception becomes a gRPC status with kanal's trailer
    fatal            stop_process: a broken invariant on a path that cannot report it ends the process
    clock            the process clock the pure cores are handed as now_ms

Imports kanal.v1 and kanal.net only.
"""
