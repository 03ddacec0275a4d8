"""Only the optional C extensions; everything else is in pyproject.toml.

Here rather than in pyproject.toml because setuptools still calls `ext-modules` there experimental.
optional=True: without a C compiler or the Python headers, the build prints a warning and the install
still succeeds; the clients then run their pure-Python paths (kanal.clients.producer.NATIVE and
kanal.clients.consumer.NATIVE are False), and the broker its pure-Python record walk
(kanal.broker.batch_validation.NATIVE is False).

    _producer_fast  produce()'s per-record path (clients/_producer_fast.c, clients/_producer_records.c)
    _consumer_fast  the consumer's per-record decoding of fetched RecordLists (clients/_consumer_fast.c)
    _batch_walk     the leader's validation walk of every produced batch's records
                    (broker/_batch_walk.c)
    _record_columns the Spark log source's walk of stored records into Arrow column buffers
                    (spark/_record_columns.c; without it, kanal.spark decodes records with protobuf)
    _metadata_columns the metadata source's walk of metadata records (JSON included) into Arrow column
                    buffers (spark/_metadata_columns.c; without it, protobuf and metadata_json.py)
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kanal.clients._producer_fast",
            sources=["clients/_producer_fast.c", "clients/_producer_records.c"],
            depends=["clients/_kanal_errors.h", "clients/_producer_records.h"],
            optional=True,
        ),
        Extension(
            "kanal.clients._consumer_fast",
            sources=["clients/_consumer_fast.c"],
            depends=["clients/_kanal_errors.h"],
            optional=True,
        ),
        Extension("kanal.broker._batch_walk", sources=["broker/_batch_walk.c"], optional=True),
        Extension("kanal.broker._kafka_records", sources=["broker/_kafka_records.c"], optional=True),
        Extension(
            "kanal.spark._record_columns", sources=["spark/_record_columns.c"],
            depends=["spark/_arrow_buffers.h"], optional=True,
        ),
        Extension(
            "kanal.spark._metadata_columns", sources=["spark/_metadata_columns.c"],
            depends=["spark/_arrow_buffers.h"], optional=True,
        ),
    ]
)
