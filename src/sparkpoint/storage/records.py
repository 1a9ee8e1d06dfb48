"""sparkpoint's own records and intents, read and written one way, whatever the store.

A record is a pydantic model stored as indented JSON (a trailing newline) at a location of
any store (a local path or a URL: storage/fileio.py), written whole and atomically (a reader
sees the old or the new one), fenced like every write (storage/fencing.py). Reading one that
is absent gives None; one that cannot be read back is CORRUPT_RECORD naming the file, what it
should have held, what was found, and what to do: the same line for a job record, an intent
of a protocol, a sink's history or a rewind.
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from sparkpoint.errors import CorruptRecordError
from sparkpoint.storage.location import Location
from sparkpoint.storage.stores import file_io

Model = TypeVar("Model", bound=BaseModel)


def encode(record: BaseModel) -> bytes:
    """The bytes a record is stored as."""
    return (json.dumps(record.model_dump(mode="json"), indent=2) + "\n").encode("utf-8")


def decode(data: bytes, model: type[Model], where: str, what: str, remedy: str) -> Model:
    """A record from its bytes, or CorruptRecordError (see the module's docs)."""
    try:
        return model.model_validate(json.loads(data.decode("utf-8")))
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        found = f"field '{field}': {first['msg']}"
    except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors included
        found = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    raise CorruptRecordError(f"{where}: expected {what}, found unreadable content ({found}); "
                             f"{remedy}")


def read_record(location: str | Location, model: type[Model], what: str,
                remedy: str) -> Model | None:
    """The record at ``location`` (None when there is none)."""
    where = str(location)
    try:
        data = file_io(where).read_bytes(where)
    except FileNotFoundError:
        return None
    return decode(data, model, where, what, remedy)


def write_record(location: str | Location, record: BaseModel) -> None:
    """Replace the record at ``location`` whole (fenced: storage/fencing.py)."""
    where = str(location)
    file_io(where).write_bytes(where, encode(record))


def remove_record(location: str | Location) -> None:
    """Remove the record at ``location``; nothing when there is none (fenced)."""
    where = str(location)
    file_io(where).delete(where)
