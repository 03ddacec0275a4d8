"""The Kafka wire-protocol listener (listener.py) and what it needs: the framing and codec (wire.py), the
batch transcode (record_batch.py, with broker/_kafka_records.c), the error map (errors.py) and one module
per family of APIs, each a translation onto the Broker service."""
