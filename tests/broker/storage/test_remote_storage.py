"""Remote storage (tiered storage's object store), every rule of remote_storage.py's docstring against
each backend: `file://` on a temporary directory and `s3://` on a real moto server process."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kanal.broker.storage import remote_file, remote_s3
from kanal.broker.storage.remote_object import STAGING_SUFFIX, StorageOptions, staging_key
from kanal.broker.storage.remote_storage import (
    ObjectExists,
    ObjectMissing,
    RemoteStorage,
    RemoteStorageError,
    open_remote_storage,
)
from kanal.deploy.s3_server import MotoServer
from kanal.v1.error import ErrorCode, KanalError

MiB = 1024 * 1024


class Backend:
    """A storage under test, and how to leave a staging object in it as a crash would."""

    def __init__(self, storage: RemoteStorage, leave_staging: Callable[[str, bytes], str]) -> None:
        self.storage = storage
        self.leave_staging = leave_staging


def open_moto(server: MotoServer, prefix: str, **overrides: object) -> RemoteStorage:
    options = {"endpoint": server.endpoint, "region": server.region, "access_key_id": server.access_key_id,
               "secret_access_key": server.secret_access_key, **overrides}
    return open_remote_storage(f"s3://{server.bucket}/{prefix}", **options)  # type: ignore[arg-type]


def moto_store(server: MotoServer, prefix: str):
    """obstore itself on the same bucket and prefix: what a crashed kanal would have left."""
    from obstore.store import S3Store

    return S3Store(server.bucket, prefix=prefix, endpoint=server.endpoint, region=server.region,
                   access_key_id=server.access_key_id, secret_access_key=server.secret_access_key,
                   client_options={"allow_http": True})


@pytest.fixture(params=["file", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "file":
        root = tmp_path / "remote"

        def leave_file(key: str, data: bytes) -> str:
            name = staging_key(key)
            path = root.joinpath(*name.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return name

        yield Backend(open_remote_storage(f"file://{root}"), leave_file)
    else:
        import obstore

        server = request.getfixturevalue("moto_s3")
        prefix = f"t/{uuid.uuid4().hex}"  # one server for the module: each test in its own prefix

        def leave_object(key: str, data: bytes) -> str:
            name = staging_key(key)
            obstore.put(moto_store(server, prefix), name, data)
            return name

        yield Backend(open_moto(server, prefix), leave_object)


# -- put_if_absent ---------------------------------------------------------------------------------------


def test_put_if_absent_refuses_an_overwrite_and_keeps_the_first_bytes(backend: Backend):
    storage = backend.storage
    assert storage.put_if_absent("topic/0/seg.log", b"first bytes") == 11
    with pytest.raises(ObjectExists) as refused:
        storage.put_if_absent("topic/0/seg.log", b"second")
    assert not refused.value.retriable and refused.value.key == "topic/0/seg.log"
    assert storage.get_range("topic/0/seg.log", 0, 100) == b"first bytes"
    assert storage.head("topic/0/seg.log").size == 11


def test_of_concurrent_puts_under_one_key_exactly_one_wins(backend: Backend):
    storage = backend.storage
    barrier = threading.Barrier(6)
    outcomes: dict[int, object] = {}

    def put(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = storage.put_if_absent("race/k", f"writer {i}".encode() * 1000)
        except ObjectExists as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=put, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [i for i, outcome in outcomes.items() if isinstance(outcome, int)]
    assert len(outcomes) == 6 and len(winners) == 1, outcomes
    assert storage.get_range("race/k", 0, 1 << 20) == f"writer {winners[0]}".encode() * 1000


def test_an_empty_object_is_an_object(backend: Backend):
    assert backend.storage.put_if_absent("empty", b"") == 0
    assert backend.storage.head("empty").size == 0
    assert backend.storage.get_range("empty", 0, 10) == b""
    with pytest.raises(ObjectExists):
        backend.storage.put_if_absent("empty", b"x")


def test_a_file_of_a_few_mib_round_trips(backend: Backend, tmp_path: Path):
    source = tmp_path / "segment.log"
    data = os.urandom(12 * MiB + 12345)
    source.write_bytes(data)
    key = "p/00000000000000000000.log"
    assert backend.storage.put_if_absent(key, source) == len(data)
    assert backend.storage.head(key).size == len(data)
    assert backend.storage.get_range(key, 0, len(data)) == data
    middle = len(data) // 2
    assert backend.storage.get_range(key, middle, middle + MiB) == data[middle:middle + MiB]


def test_a_large_file_goes_multipart_to_s3_through_a_staging_object(moto_s3: MotoServer, tmp_path: Path):
    prefix = f"mp/{uuid.uuid4().hex}"
    storage = remote_s3.open_s3_storage(f"s3://{moto_s3.bucket}/{prefix}",
                                        StorageOptions(endpoint=moto_s3.endpoint, region=moto_s3.region,
                                                       access_key_id=moto_s3.access_key_id,
                                                       secret_access_key=moto_s3.secret_access_key),
                                        multipart_bytes_min=remote_s3.PART_BYTES)
    source = tmp_path / "big.log"
    data = os.urandom(2 * remote_s3.PART_BYTES + 777)
    source.write_bytes(data)
    assert storage.put_if_absent("seg.log", source) == len(data)
    assert storage.get_range("seg.log", 0, len(data)) == data
    parts = [line for line in moto_s3.requests() if f"/{prefix}/seg.log." in line and "partNumber=" in line]
    assert len(parts) == 3, parts  # two full parts and the rest, to the staging object
    assert [o.key for o in storage.list("", include_staging=True)] == ["seg.log"]  # staging deleted
    source.write_bytes(os.urandom(len(data)))
    with pytest.raises(ObjectExists):  # the conditional copy refuses too
        storage.put_if_absent("seg.log", source)
    assert storage.get_range("seg.log", 0, len(data)) == data
    assert [o.key for o in storage.list("", include_staging=True)] == ["seg.log"]


def test_a_missing_source_file_is_the_callers_error(backend: Backend, tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        backend.storage.put_if_absent("k", tmp_path / "absent")
    assert list(backend.storage.list("", include_staging=True)) == []


# -- get_range and head ----------------------------------------------------------------------------------


def test_range_edges_read_like_pread(backend: Backend):
    storage = backend.storage
    storage.put_if_absent("r", b"0123456789")
    assert storage.get_range("r", 0, 10) == b"0123456789"
    assert storage.get_range("r", 3, 5) == b"34"
    assert storage.get_range("r", 9, 10) == b"9"
    assert storage.get_range("r", 0, 0) == b""  # empty ranges, anywhere
    assert storage.get_range("r", 10, 10) == b""
    assert storage.get_range("r", 50, 50) == b""
    assert storage.get_range("r", 7, 1000) == b"789"  # end past the object: the bytes that exist
    assert storage.get_range("r", 10, 20) == b""  # start at or past the end: none
    assert storage.get_range("r", 11, 20) == b""
    for start, end in ((5, 4), (-1, 3)):
        with pytest.raises(ValueError):
            storage.get_range("r", start, end)


def test_a_missing_object_is_object_missing_not_retriable(backend: Backend):
    storage = backend.storage
    storage.put_if_absent("dir/present", b"x")
    for call in (lambda: storage.get_range("dir/absent", 0, 5), lambda: storage.get_range("dir/absent", 0, 0),
                 lambda: storage.head("dir/absent"), lambda: storage.get_range("dir", 0, 1),
                 lambda: storage.head("dir/present/below")):
        with pytest.raises(ObjectMissing) as missing:
            call()
        assert not missing.value.retriable


def test_head_gives_size_and_modification_time(backend: Backend):
    before_ms = time.time_ns() // 1_000_000
    backend.storage.put_if_absent("h/x", b"abc")
    info = backend.storage.head("h/x")
    assert (info.key, info.size) == ("h/x", 3)
    assert before_ms - 2000 <= info.last_modified_ms <= time.time_ns() // 1_000_000 + 2000  # S3: seconds


# -- list and delete -------------------------------------------------------------------------------------


def test_list_matches_keys_by_prefix_through_nested_keys(backend: Backend):
    storage = backend.storage
    keys = ["t1/0/a.log", "t1/0/b.log", "t1/1/a.log", "t10/0/a.log", "t1.meta", "u/x"]
    for i, key in enumerate(keys):
        storage.put_if_absent(key, b"x" * i)

    def listed(prefix: str) -> set[str]:
        return {o.key for o in storage.list(prefix)}

    assert listed("") == set(keys)
    assert listed("t1/") == {"t1/0/a.log", "t1/0/b.log", "t1/1/a.log"}
    assert listed("t1") == set(keys) - {"u/x"}  # a character prefix, as S3's
    assert listed("t1/0/a") == {"t1/0/a.log"}
    assert listed("t1/0/a.log") == {"t1/0/a.log"}
    assert listed("t1/1/") == {"t1/1/a.log"}
    assert listed("zz/") == set() and listed("t1/0/a.log/") == set()
    assert {o.key: o.size for o in storage.list("t1/0/")} == {"t1/0/a.log": 0, "t1/0/b.log": 1}


def test_delete_is_idempotent_and_frees_the_key(backend: Backend):
    storage = backend.storage
    storage.put_if_absent("d/a", b"1")
    storage.put_if_absent("d/b", b"2")
    storage.delete(["d/a", "d/never"])
    storage.delete(["d/a"])
    storage.delete([])
    assert [o.key for o in storage.list("d/")] == ["d/b"]
    with pytest.raises(ObjectMissing):
        storage.get_range("d/a", 0, 1)
    assert storage.put_if_absent("d/a", b"again") == 5
    assert storage.get_range("d/a", 0, 10) == b"again"


# -- crashes in the middle of a put ----------------------------------------------------------------------


def test_a_put_cut_before_its_object_appeared_leaves_no_visible_object(backend: Backend):
    storage = backend.storage
    name = backend.leave_staging("p/seg.log", b"half of a segment")
    assert name.startswith("p/seg.log.") and name.endswith(STAGING_SUFFIX)
    assert list(storage.list("")) == [] and list(storage.list("p/")) == []
    with pytest.raises(ObjectMissing):
        storage.get_range("p/seg.log", 0, 4)
    assert [o.key for o in storage.list("p/", include_staging=True)] == [name]  # the orphan sweep's view
    assert storage.put_if_absent("p/seg.log", b"whole") == 5  # a retry is not blocked by it
    storage.delete([name])
    assert [o.key for o in storage.list("", include_staging=True)] == ["p/seg.log"]


def test_file_put_cut_after_the_link_shows_the_object_once(tmp_path: Path):
    """A crash between link and unlink leaves two names of one inode: only the key's is listed."""
    storage = open_remote_storage(f"file://{tmp_path}")
    storage.put_if_absent("a/seg.log", b"data")
    os.link(tmp_path / "a" / "seg.log", tmp_path / "a" / staging_key("seg.log"))
    assert [(o.key, o.size) for o in storage.list("")] == [("a/seg.log", 4)]


def test_file_listing_leaves_out_names_kanal_does_not_write(tmp_path: Path):
    storage = open_remote_storage(f"file://{tmp_path}")
    storage.put_if_absent("a/seg.log", b"data")
    (tmp_path / "a" / "notes with spaces.txt").write_text("hi")
    (tmp_path / "a" / "stray.tmp").write_text("an editor's")
    os.symlink(tmp_path / "a" / "seg.log", tmp_path / "a" / "link.log")
    assert [o.key for o in storage.list("", include_staging=True)] == ["a/seg.log"]


@pytest.mark.parametrize("refused", ["copy_file_range", "both"])
def test_file_put_falls_back_when_the_kernel_refuses_a_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            refused: str):
    def unsupported(src: int, dst: int) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(remote_file, "_copy_file_range", unsupported)
    if refused == "both":
        monkeypatch.setattr(remote_file, "_sendfile", unsupported)
    data = os.urandom(3 * MiB + 1)
    (tmp_path / "src").write_bytes(data)
    storage = open_remote_storage(f"file://{tmp_path / 'remote'}")
    assert storage.put_if_absent("k", tmp_path / "src") == len(data)
    assert storage.get_range("k", 0, len(data)) == data


# -- failures --------------------------------------------------------------------------------------------


def test_a_stopped_s3_server_gives_retriable_errors(tmp_path: Path):
    server = MotoServer.start(tmp_path / "moto.log")  # its own: stopping the module's would lose its objects
    try:
        storage = open_moto(server, "down")
        storage.put_if_absent("k", b"before")
    finally:
        server.stop()
    assert server.process.poll() is not None
    calls = {"put": lambda: storage.put_if_absent("k2", b"x"), "get": lambda: storage.get_range("k", 0, 3),
             "head": lambda: storage.head("k"), "list": lambda: list(storage.list("")),
             "delete": lambda: storage.delete(["k"])}
    for name, call in calls.items():
        started = time.monotonic()
        with pytest.raises(RemoteStorageError) as failed:
            call()
        assert type(failed.value) is RemoteStorageError and failed.value.retriable, (name, failed.value)
        assert time.monotonic() - started < remote_s3.RETRY_TIMEOUT.total_seconds() + 5, name


class _Answer(BaseHTTPRequestHandler):
    status = 503

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(self.status)
        self.send_header("content-length", "0")
        self.end_headers()

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "retriable"), [(503, True), (500, True), (429, True), (403, False),
                                                   (400, False)])
def test_s3_answers_map_to_retriable_or_not(status: int, retriable: bool):
    handler = type("Handler", (_Answer,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        storage = open_remote_storage("s3://bucket/p", endpoint=f"http://127.0.0.1:{server.server_port}",
                                      access_key_id="a", secret_access_key="b", region="us-east-1")
        for call in (lambda: storage.put_if_absent("k", b"x"), lambda: storage.get_range("k", 0, 3),
                     lambda: list(storage.list(""))):
            with pytest.raises(RemoteStorageError) as failed:
                call()
            assert type(failed.value) is RemoteStorageError, failed.value
            assert failed.value.retriable is retriable, failed.value
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_missing_bucket_is_an_error_not_a_missing_object(moto_s3: MotoServer):
    storage = open_remote_storage("s3://no-such-bucket/p", endpoint=moto_s3.endpoint, region=moto_s3.region,
                                  access_key_id="a", secret_access_key="b")
    for call in (lambda: storage.put_if_absent("k", b"x"), lambda: storage.get_range("k", 0, 3),
                 lambda: list(storage.list(""))):
        with pytest.raises(RemoteStorageError, match="no-such-bucket") as failed:
            call()
        assert type(failed.value) is RemoteStorageError and not failed.value.retriable


# -- opening ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "options"), [
    ("ftp://host/dir", {}),
    ("nonsense", {}),
    ("", {}),
    ("file://host/dir", {}),
    ("file:relative/dir", {}),
    ("file:///a/../b", {}),
    ("file:///tmp/x?y=1", {}),
    ("file:///tmp/remote", {"endpoint": "http://127.0.0.1:9000"}),
    ("file:///tmp/remote", {"access_key_id": "a", "secret_access_key": "b"}),
    ("s3://", {}),
    ("s3://Bad_Bucket/p", {}),
    ("s3://bucket:99/p", {}),
    ("s3://bucket/a//b", {}),
    ("s3://bucket/a/../b", {}),
    ("s3://bucket/p?versionId=1", {}),
    ("s3://bucket/p", {"endpoint": "ftp://127.0.0.1:9000"}),
    ("s3://bucket/p", {"endpoint": "not a url"}),
    ("s3://bucket/p", {"endpoint": "http://"}),
    ("s3://bucket/p", {"endpoint": "http://127.0.0.1:99999"}),
    ("s3://bucket/p", {"endpoint": "http://127.0.0.1:9000/path"}),
    ("s3://bucket/p", {"access_key_id": "only-the-id"}),
])
def test_a_bad_url_or_option_is_invalid_config(url: str, options: dict[str, str]):
    with pytest.raises(KanalError) as refused:
        open_remote_storage(url, **options)
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    assert url in refused.value.message or "endpoint" in refused.value.message, refused.value.message


def test_credentials_never_show(tmp_path: Path):
    with pytest.raises(KanalError) as refused:
        open_remote_storage("s3://AKIDEXAMPLE:sekrit@bucket/p")
    assert refused.value.code == ErrorCode.INVALID_CONFIG and "sekrit" not in str(refused.value)
    storage = open_remote_storage("s3://bucket/some/prefix/", endpoint="https://s3.example.com",
                                  access_key_id="AKIDEXAMPLE", secret_access_key="sekrit")
    assert storage.url == "s3://bucket/some/prefix"
    assert "sekrit" not in repr(storage) and "AKIDEXAMPLE" not in repr(storage) + storage.url
    assert "sekrit" not in repr(StorageOptions(secret_access_key="sekrit"))
    assert open_remote_storage(f"file://{tmp_path}/r").url == f"file://{tmp_path}/r"


def test_a_file_url_on_a_regular_file_is_invalid_config(tmp_path: Path):
    (tmp_path / "f").write_text("")
    with pytest.raises(KanalError) as refused:
        open_remote_storage(f"file://{tmp_path}/f/remote")
    assert refused.value.code == ErrorCode.INVALID_CONFIG


def test_s3_without_obstore_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "obstore", None)  # `import obstore` now raises ModuleNotFoundError
    with pytest.raises(KanalError) as refused:
        open_remote_storage("s3://bucket/p")
    assert refused.value.code == ErrorCode.MISSING_DEPENDENCY
    assert "pip install 'kanal[s3]'" in refused.value.message


def test_s3_takes_credentials_and_region_from_the_aws_variables(moto_s3: MotoServer,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_s3.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_s3.secret_access_key)
    monkeypatch.setenv("AWS_REGION", moto_s3.region)
    storage = open_remote_storage(f"s3://{moto_s3.bucket}/env/{uuid.uuid4().hex}", endpoint=moto_s3.endpoint)
    assert storage.put_if_absent("k", b"v") == 1
    assert storage.get_range("k", 0, 1) == b"v"


@pytest.mark.parametrize("key", ["", "/abs", "../up", "a/../../b", "a//b", "a/./b", "a/", "x.tmp",
                                 "with space", "a\\b", "é"])
def test_a_malformed_key_is_refused_before_any_io(backend: Backend, key: str):
    storage = backend.storage
    for call in (lambda: storage.put_if_absent(key, b"x"), lambda: storage.get_range(key, 0, 1),
                 lambda: storage.head(key), lambda: storage.delete([key])):
        with pytest.raises(ValueError):
            call()
    assert list(storage.list("", include_staging=True)) == []


def test_file_keys_cannot_nest_under_an_object(tmp_path: Path):
    """S3 holds `a` beside `a/b`; a directory cannot: refused for good, and `a` is untouched."""
    storage = open_remote_storage(f"file://{tmp_path}")
    storage.put_if_absent("a", b"object")
    with pytest.raises(RemoteStorageError) as refused:
        storage.put_if_absent("a/b", b"below")
    assert type(refused.value) is RemoteStorageError and not refused.value.retriable
    assert [(o.key, o.size) for o in storage.list("", include_staging=True)] == [("a", 6)]
