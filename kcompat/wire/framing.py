"""Length-prefixed Kafka frames, sans-IO.

Theory of operation
-------------------
Every Kafka request is an int32 size followed by that many bytes. ``FrameReader``
is fed whatever the socket delivered and hands back complete frames. The size is
checked the moment its four bytes arrive, so a frame over
``socket.request.max.bytes`` is refused before a single byte of it is buffered
(``FrameTooLarge``); a negative size is ``MalformedFrame``. Both are protocol
errors after which the connection must be closed.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer broke the framing; close the connection."""


class FrameTooLarge(FrameError):
    pass


class MalformedFrame(FrameError):
    pass


class FrameReader:
    def __init__(self, max_frame_bytes: int, limit_key: str = "socket.request.max.bytes") -> None:
        self.max_frame_bytes = max_frame_bytes
        self.limit_key = limit_key  # the config that set the limit, named when refused
        self._buf = bytearray()
        self._need = -1  # size of the frame being assembled, -1 while reading a size

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        """Add received bytes; return every frame completed by them.

        Each frame is copied exactly once. When nothing is buffered (the usual
        case: a receive starts at a frame boundary) frames are cut straight out
        of ``data`` and only an incomplete tail is buffered; otherwise ``data``
        is appended to the buffer and frames are cut from it through a
        memoryview, and the consumed prefix is dropped once at the end."""
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data
        frames: list[bytes] = []
        pos = 0
        end = len(src)
        with memoryview(src) as view:
            while True:
                if self._need < 0:
                    if end - pos < 4:
                        break
                    size = _SIZE.unpack_from(src, pos)[0]
                    if size < 0:
                        raise MalformedFrame(f"negative frame size {size}")
                    if size > self.max_frame_bytes:
                        raise FrameTooLarge(
                            f"frame of {size} bytes exceeds {self.limit_key} "
                            f"{self.max_frame_bytes}"
                        )
                    pos += 4
                    self._need = size
                if end - pos < self._need:
                    break
                frames.append(bytes(view[pos : pos + self._need]))
                pos += self._need
                self._need = -1
        if src is buf:
            del buf[:pos]
        elif pos < end:
            buf += data[pos:] if pos else data
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
