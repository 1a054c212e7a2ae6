"""Services a run needs: child processes, embedded PostgreSQL and NATS, clock skew, temp dirs."""

from chaos.services.clock import SkewFile, libfaketime_library
from chaos.services.nats import (
    NatsPermissions,
    NatsService,
    NatsUser,
    external_nats,
    jetstream_consumer,
    jetstream_publisher,
    open_nats,
    read_nats_info,
)
from chaos.services.ports import free_port, tcp_accepting
from chaos.services.postgres import (
    PostgresRole,
    PostgresService,
    create_role,
    drop_role,
    external_postgres,
    harness_dsn,
    open_postgres,
    require_passwords,
)
from chaos.services.process import (
    ExitHook,
    LogSink,
    ManagedProcess,
    ReadyProbe,
    open_process_service,
)
from chaos.services.reader import PostgresReader, create_reader
from chaos.services.rundir import default_run_parent, open_run_dir
from chaos.services.supervise import RestartPolicy

__all__ = [
    "ExitHook",
    "LogSink",
    "ManagedProcess",
    "NatsPermissions",
    "NatsService",
    "NatsUser",
    "PostgresReader",
    "PostgresRole",
    "PostgresService",
    "ReadyProbe",
    "RestartPolicy",
    "SkewFile",
    "create_reader",
    "create_role",
    "default_run_parent",
    "drop_role",
    "external_nats",
    "external_postgres",
    "free_port",
    "harness_dsn",
    "jetstream_consumer",
    "jetstream_publisher",
    "libfaketime_library",
    "open_nats",
    "open_postgres",
    "open_process_service",
    "open_run_dir",
    "read_nats_info",
    "require_passwords",
    "tcp_accepting",
]
