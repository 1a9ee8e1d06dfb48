"""moto's S3 server, with S3's conditional writes made atomic as S3 makes them.

moto 5.2.5 checks ``If-None-Match: *`` and then stores the object (``S3Response.put_object``
in moto/s3/responses.py), holding nothing between the two, and its server answers requests
on threads: two conditional puts of one key at once can both succeed, the later replacing
the earlier. S3 itself lets exactly one succeed and refuses the other 412, and sparkpoint's
leases, snapshot names and startpoint ids rely on that (tests/unit/test_s3_test_server.py
shows both). Every object PUT is therefore made one at a time here; moto keeps objects in
memory, so this costs the tests little.

Run as ``python -m tests.support.moto_server <moto.server's arguments>``.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from moto import server
from moto.s3.responses import S3Response

ATOMIC_ENV = "SPARKPOINT_TEST_MOTO_AS_IS"  # set: moto exactly as released (to show the race)
_one_put_at_a_time = threading.Lock()
_put = S3Response._key_response_put


def _atomic_put(self: S3Response, *args: Any, **kwargs: Any) -> Any:
    with _one_put_at_a_time:
        return _put(self, *args, **kwargs)


if __name__ == "__main__":
    import os

    if not os.environ.get(ATOMIC_ENV):
        S3Response._key_response_put = _atomic_put  # type: ignore[method-assign]
    server.main(sys.argv[1:])
