"""kanal.v1: the generated Python stubs of kanal's public contract (`proto/kanal/v1/*.proto`).

Regenerate with `python proto/generate.py`; never edit the `*_pb2*.py` files by hand.
"""
