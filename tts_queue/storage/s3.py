"""Storage in an S3-compatible bucket (boto3): AWS S3, MinIO, Ceph, moto.

Endpoint, region and credentials come from the usual ``AWS_*`` variables. A put is one PUT (S3
never shows a partial object); a reader is seekable, each read after a seek one ranged GET.
"""

from __future__ import annotations

import io
import itertools
import mimetypes
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol, TypedDict, cast

from tts_queue.errors import ConfigError, StorageUnavailable
from tts_queue.storage.backend import StoredObject

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# --- what this module asks of boto3's S3 client (boto3 ships no types; mypy_boto3_s3 is not a
# dependency): the calls made and the parts of their answers read ----------------------------


class ObjectBody(Protocol):
    """A GET's streamed body (botocore's ``StreamingBody``)."""

    def read(self, amt: int | None = None, /) -> bytes: ...
    def close(self) -> None: ...


class GetObjectAnswer(TypedDict, total=False):
    Body: ObjectBody
    ContentLength: int
    ContentRange: str  # "bytes 0-9/100" on a ranged GET


class HeadObjectAnswer(TypedDict, total=False):
    ContentLength: int


class DeleteError(TypedDict, total=False):
    Key: str
    Code: str
    Message: str


class DeleteObjectsAnswer(TypedDict, total=False):
    Errors: list[DeleteError]


class ListedObject(TypedDict):
    Key: str
    Size: int
    LastModified: datetime


class ListPage(TypedDict, total=False):
    Contents: list[ListedObject]


class Paginator(Protocol):
    def paginate(self, **kwargs: str) -> Iterable[ListPage]: ...


class S3Client(Protocol):
    """The methods of a boto3 S3 client this storage calls."""

    def put_object(self, **kwargs: object) -> object: ...
    def upload_file(self, filename: str, bucket: str, key: str, **kwargs: object) -> None: ...
    def get_object(self, **kwargs: object) -> GetObjectAnswer: ...
    def head_object(self, **kwargs: object) -> HeadObjectAnswer: ...
    def head_bucket(self, **kwargs: object) -> object: ...
    def delete_objects(self, **kwargs: object) -> DeleteObjectsAnswer: ...
    def get_paginator(self, operation_name: str, /) -> Paginator: ...
    def generate_presigned_url(self, method: str, **kwargs: object) -> str: ...


class S3Storage:
    """Objects in an S3-compatible bucket under a key prefix (boto3, one thread-safe client)."""

    def __init__(self, bucket: str, prefix: str = "", client: S3Client | None = None) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.local_root: Path | None = None
        self.client = client if client is not None else _s3_client()

    def key(self, name: str) -> str:
        """The object key of ``name``."""
        return self.prefix + name

    def child(self, prefix: str) -> S3Storage:
        """The storage under ``prefix`` (same bucket and client)."""
        return S3Storage(self.bucket, self.prefix + prefix.strip("/"), client=self.client)

    def put(self, name: str, data: bytes, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        with _mapped(name):
            self.client.put_object(Bucket=self.bucket, Key=self.key(name), Body=data, **extra)

    def put_file(self, name: str, source: Path, content_type: str | None = None,
                 beside: Mapping[str, bytes] | None = None) -> None:
        """Upload a finished file (multipart when large: the object appears once complete), then
        remove the local copy; ``beside``'s small objects are put first."""
        for other, data in (beside or {}).items():
            self.put(other, data, mimetypes.guess_type(other)[0])
        extra = {"ExtraArgs": {"ContentType": content_type}} if content_type else {}
        with _mapped(name):
            self.client.upload_file(str(source), self.bucket, self.key(name), **extra)
        source.unlink(missing_ok=True)

    def scratch(self) -> Path:
        """A local directory for files made before they are uploaded."""
        import tempfile

        return Path(tempfile.gettempdir())

    def open(self, name: str, start: int = 0) -> IO[bytes]:
        return io.BufferedReader(S3Reader(self, name, start), buffer_size=256 * 1024)

    def read(self, name: str) -> bytes:
        with _mapped(name):
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(name))["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

    def delete(self, names: Iterable[str]) -> None:
        """Delete in batches of 1000 (one request each); missing objects are not errors."""
        items = iter(names)
        while batch := list(itertools.islice(items, 1000)):
            with _mapped(batch[0]):
                answer = self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self.key(n)} for n in batch], "Quiet": True})
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise StorageUnavailable(f"the bucket refused to delete {first.get('Key')}: "
                                         f"{first.get('Code')} {first.get('Message')}")

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Objects under ``prefix`` in key order, a page (1000) at a time."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.key(prefix))
        with _mapped(prefix or "/"):
            for page in pages:
                for item in page.get("Contents", ()):
                    yield StoredObject(item["Key"][len(self.prefix):], int(item["Size"]),
                                       item["LastModified"].timestamp())

    def size(self, name: str) -> int | None:
        try:
            with _mapped(name):
                return int(self.client.head_object(Bucket=self.bucket, Key=self.key(name))["ContentLength"])
        except FileNotFoundError:
            return None

    def disk_usage(self) -> tuple[float, int] | None:
        return None  # a bucket has no filesystem

    def free_bytes(self) -> int | None:
        return None  # a bucket has no free-space figure; TTS_AUDIO_MAX_BYTES bounds it

    def ping(self) -> None:
        """Raise ``StorageUnavailable`` unless the bucket answers (one HEAD request)."""
        try:
            with _mapped(self.bucket):
                self.client.head_bucket(Bucket=self.bucket)
        except FileNotFoundError:
            raise StorageUnavailable(f"the bucket {self.bucket!r} does not exist (or these credentials "
                                     "cannot see it)") from None

    def presign(self, name: str, expires_s: float, content_type: str, filename: str) -> str | None:
        with _mapped(name):  # no credentials, for one
            url: str = self.client.generate_presigned_url("get_object", ExpiresIn=int(expires_s), Params={
                "Bucket": self.bucket, "Key": self.key(name), "ResponseContentType": content_type,
                "ResponseContentDisposition": f'attachment; filename="{filename}"'})
        return url


class _BeyondEnd(Exception):
    """A ranged GET started past the object's end."""


class S3Reader(io.RawIOBase):
    """A seekable reader over one object: each read after a seek is one ranged GET, streamed.

    The first GET is made when the reader is created, from ``start`` (where the caller will read
    first: the start of an HTTP Range), so a missing object raises ``FileNotFoundError`` before a
    response has started, and a Range costs one request.
    """

    def __init__(self, storage: S3Storage, name: str, start: int = 0) -> None:
        super().__init__()
        self.storage, self.name = storage, name
        self.body: ObjectBody | None = None
        try:
            self.length = self._get(start)
            self.position = start
        except _BeyondEnd:  # let the caller find out (an HTTP 416), from a reader at 0
            self.length = self._get(0)
            self.position = 0

    def _get(self, start: int) -> int:
        """Start streaming from ``start``; the object's full length."""
        from botocore.exceptions import ClientError

        extra = {"Range": f"bytes={start}-"} if start else {}
        with _mapped(self.name):
            try:
                answer = self.storage.client.get_object(Bucket=self.storage.bucket,
                                                        Key=self.storage.key(self.name), **extra)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                    raise _BeyondEnd from None
                raise
        self.body = answer["Body"]
        if start:
            return int(answer["ContentRange"].rsplit("/", 1)[1])
        return int(answer["ContentLength"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self.position + offset,
                  io.SEEK_END: self.length + offset}[whence]
        if target != self.position:
            self._drop()
            self.position = max(0, target)
        return self.position

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self.position >= self.length:
            return 0
        if self.body is None:
            self._get(self.position)
        assert self.body is not None
        target = memoryview(buffer).cast("B")
        with _mapped(self.name):
            data = self.body.read(len(target))
        target[: len(data)] = data
        self.position += len(data)
        return len(data)

    def _drop(self) -> None:
        if self.body is not None:
            self.body.close()
            self.body = None

    def close(self) -> None:
        self._drop()
        super().close()


@contextmanager
def _mapped(name: str) -> Iterator[None]:
    """Turn boto3's errors into ``FileNotFoundError`` (missing object) or ``StorageUnavailable``."""
    try:
        yield
    except (FileNotFoundError, StorageUnavailable):
        raise
    except Exception as exc:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, S3UploadFailedError):  # upload_file wraps the client's error
            raise StorageUnavailable(f"the object store refused {name!r}: {exc}") from exc
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            if error.get("Code") in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(f"no stored object {name!r}") from None
            raise StorageUnavailable(f"the object store refused {name!r}: {error.get('Code')} "
                                     f"{error.get('Message', '')}".strip()) from exc
        if isinstance(exc, BotoCoreError):
            raise StorageUnavailable(f"the object store cannot be reached: {exc}") from exc
        raise


def _s3_client() -> S3Client:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError("an s3:// TTS_STORAGE_URL needs boto3: pip install 'tts-queue[s3]'") from None
    config = Config(signature_version="s3v4", retries={"mode": "standard", "max_attempts": 5},
                    max_pool_connections=32, connect_timeout=5, read_timeout=30)
    return cast(S3Client, boto3.session.Session().client("s3", config=config))  # boto3 is untyped
