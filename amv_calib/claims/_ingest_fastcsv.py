"""The fast first pass over a plain CSV file (:class:`_FastCsv`).

pyarrow parses the numbers, flags and timestamps itself, with all cores; a chunk with a row to
reject goes to the consumer as text, so rejects and their reasons always come from the text
path of :mod:`amv_calib.claims._ingest_read`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from amv_calib.claims._arrow import IntArray
from amv_calib.claims._ingest_chunk import _batch_columns, _Chunk, _ParsedChunk
from amv_calib.claims._ingest_columns import _ARROW_TYPES, _SPECS, _resolve_columns, _spellings
from amv_calib.claims._ingest_parse import _FALSE_FAST, _TRUE_FAST, _Parsed
from amv_calib.claims._ingest_validate import _parse_chunk
from amv_calib.contract import open_regular
from amv_calib.exceptions import AmvCalibError

#: Bytes per block of the fast CSV path (cut at a line end; pyarrow parses each one with
#: all cores).
_FAST_BLOCK: Final = 1 << 25
_FIRST_BLOCK: Final = 1 << 21
# After a chunk needed its text, this many blocks are read as text only: a file with bad
# rows throughout would otherwise pay for two reads of every block.
_TEXT_BLOCKS_AFTER_FALLBACK: Final = 8
_FAST_SUFFIXES: Final = (".csv", ".tsv", ".txt")


def _resizable(buf: bytearray) -> bool:
    """Whether nothing holds a view of ``buf`` (a bytearray with exports cannot resize)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


@dataclass(kw_only=True)
class _CsvBlock:
    offset: int  # of its first byte in the file
    length: int
    ascii: bool = False
    typed: pa.Table | None = None
    text: pa.Table | None = None
    parsed: Future[_ParsedChunk] | None = None  # of ``typed``


def _pieces(parts: Sequence[pa.Array | pa.ChunkedArray]) -> pa.ChunkedArray:
    """One chunked array of the chunks of ``parts`` (no copy)."""
    chunks: list[pa.Array] = []
    for p in parts:
        chunks.extend(p.chunks if isinstance(p, pa.ChunkedArray) else [p])
    return pa.chunked_array(chunks, type=parts[0].type)


class _FastCsv:
    """Fast first pass over an uncompressed CSV file: numbers, flags and timestamps parsed
    by pyarrow's multithreaded reader itself.

    The file is read in blocks cut at line ends, which are record ends as
    long as no quote character occurs (so no value holds a newline). Each block is parsed
    by pyarrow with the numeric / boolean / timestamp columns in their output types (a
    block where that fails is parsed as text), then checked row by row in a second thread
    while the next block is read. A chunk whose rows all pass goes to the consumer parsed,
    with an ``as_text`` re-read of its blocks for when the consumer finds a duplicate; any
    other chunk goes as text. So rejects and their reasons always come from the text path.
    pyarrow's typed parsing accepts a subset of what the text path accepts, with the same
    values (the tests compare both paths).

    The pass stops at the first block it cannot take (a quote character, a malformed row,
    unreadable text) with :attr:`complete` false; :attr:`next_row` is then the first row
    not yet yielded, every row before it well-formed and yielded in whole chunks.
    """

    def __init__(self, path: Path, header: Sequence[str], chunksize: int) -> None:
        self.path = path
        self.header = list(header)
        self.chunksize = chunksize
        self.next_row = 1
        self.complete = False
        self._text_left = 0
        mapping, _ = _resolve_columns(self.header)
        self._mapping = mapping
        self._out_columns = [c for c in _SPECS if c in mapping]
        self._pool: ThreadPoolExecutor | None = None
        self._text_types = {name: pa.large_string() for name in self.header}
        self._types = dict(self._text_types)
        for canonical, name in mapping.items():
            kind = _SPECS[canonical].kind
            if kind in ("float", "bool", "timestamp"):
                self._types[name] = _ARROW_TYPES[kind]

    def _open_body(self) -> io.BufferedReader | None:
        """The file, positioned after its header line, or None if not eligible."""
        if self.path.suffix.lower() not in _FAST_SUFFIXES:
            return None
        if any(len(names) > 1 for names in _spellings(self.header).values()):
            return None  # a column spelled twice is merged from its text (_merged_column)
        try:
            # open_regular: a read that fails (EIO) raises an error naming the file
            fh = open_regular(self.path)  # closed by _blocks
        except AmvCalibError:
            return None
        line = fh.readline(1 << 20)
        ok = line.endswith(b"\n")
        line = line[:-1]
        line = line[:-1] if line.endswith(b"\r") else line
        ok = ok and b'"' not in line and b"\r" not in line
        try:
            ok = ok and line.decode("utf-8").removeprefix("\ufeff").split(",") == self.header
        except UnicodeDecodeError:
            ok = False
        if not ok:
            fh.close()
            return None
        return fh

    def _read(self, data: pa.Buffer, types: Mapping[str, pa.DataType], ascii: bool
              ) -> pa.Table:
        """``data`` parsed; pa.ArrowInvalid if a value does not parse or a row is malformed.

        ``ascii``: ``data`` is plain ASCII, hence valid UTF-8 (pyarrow's check is skipped).
        No invalid-row handler: it slows pyarrow's parser, and the text reader numbers
        malformed rows anyway.
        """
        return pacsv.read_csv(
            data,
            read_options=pacsv.ReadOptions(column_names=self.header, use_threads=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                # Only an empty field is null (it is 'empty' for a required column, so that
                # chunk goes to the text path); 'NaN' or 'null' must parse or fail.
                null_values=[""],
                true_values=_TRUE_FAST.to_pylist(),
                false_values=_FALSE_FAST.to_pylist(),
                check_utf8=not ascii,
            ),
        )

    def _blocks(self) -> Iterator[_CsvBlock | None]:
        """Blocks with ``typed`` or ``text`` set; None where the pass must stop."""
        fh = self._open_body()
        if fh is None:
            yield None
            return
        with fh:
            yield from self._blocks_of(fh)

    def _blocks_of(self, fh: io.BufferedReader) -> Iterator[_CsvBlock | None]:
        # Read, not memory-mapped: a file truncated while mapped kills the process with
        # SIGBUS, where a read just ends early. A block ends at its last line end; the
        # partial line after it is read again as the start of the next block. The buffer
        # is reused once pyarrow has parsed it (its tables hold copies; a buffer still
        # exported is never written again), and a block needed as text later is read
        # again from the file (_text_of). Small first blocks, so validation starts early.
        step = min(_FAST_BLOCK, _FIRST_BLOCK)
        pos = fh.tell()
        # one buffer of the largest block (or the whole rest of a smaller file)
        largest = max(step, min(_FAST_BLOCK, os.fstat(fh.fileno()).st_size - pos + 1))
        buf = bytearray()
        while True:
            if len(buf) < step or not _resizable(buf):
                buf = bytearray(max(largest, step))
            with memoryview(buf) as whole, whole[:step] as room:
                got = fh.readinto(room)
            if not got:
                return
            if got < step:  # the end of the file
                data: bytes | bytearray = buf
                end = got
            else:
                step = min(2 * step, _FAST_BLOCK)
                cut = buf.rfind(b"\n", 0, got)
                data, end = buf, cut + 1
                if cut < 0:  # one very long line: read on until it ends, into new bytes
                    longer = bytes(buf[:got])
                    while cut < 0:
                        more = fh.read(step)
                        if not more:
                            break
                        at = len(longer)
                        longer += more
                        cut = longer.find(b"\n", at)
                    data = longer
                    end = len(longer) if cut < 0 else cut + 1
                    got = len(longer)
                fh.seek(end - got, os.SEEK_CUR)
            if data.find(b'"', 0, end) >= 0:
                yield None
                return
            block = _CsvBlock(offset=pos, length=end)
            pos += end
            raw = pa.py_buffer(memoryview(data)[:end])
            block.ascii = bool(np.frombuffer(raw, dtype=np.uint8).max(initial=0) < 0x80)
            try:
                block = self._parse_block(block, raw)
            except pa.ArrowInvalid:  # a malformed row or bad text: the text reader's job
                yield None
                return
            del raw  # the buffer is free for the next block unless something still holds it
            yield block

    def _parse_block(self, block: _CsvBlock, raw: pa.Buffer) -> _CsvBlock:
        """``block`` with ``typed`` (and its row checks submitted) or ``text`` set."""
        if self._text_left > 0:
            self._text_left -= 1
        else:
            try:
                block.typed = self._read(raw, self._types, block.ascii)
                assert self._pool is not None
                block.parsed = self._pool.submit(self._parse, block.typed)
            except pa.ArrowInvalid:  # a value not of its column's type, or a bad row
                self._text_left = _TEXT_BLOCKS_AFTER_FALLBACK
        if block.typed is None:
            block.text = self._read(raw, self._text_types, block.ascii)
        return block

    def _text_of(self, block: _CsvBlock) -> pa.Table:
        if block.text is None:
            # The same bytes parsed typed without a malformed row: as text they parse too.
            with open_regular(self.path) as fh:
                fh.seek(block.offset)
                raw = fh.read(block.length)
            if len(raw) != block.length:
                raise AmvCalibError(
                    f"ingest: {self.path} changed while it was read (bytes {block.offset} to "
                    f"{block.offset + block.length} are gone)")
            try:
                text = self._read(pa.py_buffer(raw), self._text_types, block.ascii)
            except pa.ArrowInvalid as exc:  # pragma: no cover - see above
                raise AmvCalibError(f"ingest: a CSV block read typed but not as text: {exc}"
                                    ) from exc
            typed = block.typed
            if typed is None or text.num_rows != typed.num_rows:
                raise AmvCalibError("ingest: a CSV block read typed and as text differ"
                                    )  # pragma: no cover - see above
            block.text = text
        return block.text

    def _columns(self, tables: list[pa.Table]) -> dict[str, pa.Array]:
        return _batch_columns(tables[0] if len(tables) == 1 else pa.concat_tables(tables))

    def _parse(self, typed: pa.Table) -> _ParsedChunk:
        # Parsing is row by row (a value's outcome does not depend on its neighbours), so
        # a block parsed whole gives each of its rows what the chunk parsed whole would.
        # The columns stay in pyarrow's pieces (the parsers take chunked arrays, and the
        # values are put together once, for the output), except the id, which is hashed
        # from its buffers.
        ids = self._mapping["claim_id"]
        columns = {name: (col.combine_chunks() if name == ids else col)
                   for name, col in zip(typed.schema.names, typed.columns, strict=True)}
        chunk = _Chunk(columns=columns, rows=np.zeros(typed.num_rows, dtype=np.int64))
        return _parse_chunk(chunk, self._mapping, self._out_columns)

    def _chunk(self, pieces: list[tuple[_CsvBlock, int, int]], rows: IntArray) -> _Chunk:
        n = len(rows)

        def text() -> dict[str, pa.Array]:
            self._text_left = _TEXT_BLOCKS_AFTER_FALLBACK
            return self._columns([self._text_of(b).slice(o, k) for b, o, k in pieces])

        if not all(b.parsed is not None for b, _, _ in pieces):
            return _Chunk(columns=self._columns([self._text_of(b).slice(o, k)
                                                 for b, o, k in pieces]), rows=rows)
        parts = [(cast("Future[_ParsedChunk]", b.parsed).result(), o, k) for b, o, k in pieces]
        if any(p.bad[o:o + k].any() for p, o, k in parts):
            return _Chunk(columns=text(), rows=rows)
        # No row with a problem of its own; duplicates are for the consumer to find, and
        # then it validates the text (``as_text``).
        chunk = _Chunk(columns={}, rows=rows, as_text=text)
        chunk.parsed = _ParsedChunk(
            chunk=chunk,
            parsed={c: _Parsed(values=_pieces([p.parsed[c].values.slice(o, k)
                                               for p, o, k in parts]), problems=[])
                    for c in self._out_columns},
            sources={},  # no row of this chunk is rejected, so no reason needs its text
            bad=np.zeros(n, dtype=bool),
            key_ok=np.concatenate([p.key_ok[o:o + k] for p, o, k in parts]),
            keys=np.concatenate([p.keys[o:o + k] for p, o, k in parts]),
        )
        return chunk

    def chunks(self) -> Iterator[_Chunk]:
        """Chunks of ``chunksize`` rows (the last may be short) while the pass can go on."""
        # Blocks are parsed, and chunks put together, in a thread of their own while the
        # next blocks are read; each chunk is yielded at once with the future of its parts.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amv-calib-ingest-parse")
        try:
            yield from self._chunks()
        except GeneratorExit:
            self._pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            self._pool.shutdown(wait=False)  # the queued work still runs
            self._pool = None

    def _submit(self, pieces: list[tuple[_CsvBlock, int, int]]) -> _Chunk:
        n = sum(k for _, _, k in pieces)
        rows = np.arange(self.next_row, self.next_row + n, dtype=np.int64)
        self.next_row += n
        assert self._pool is not None
        return _Chunk(columns={}, rows=rows, future=self._pool.submit(self._chunk, pieces, rows))

    def _chunks(self) -> Iterator[_Chunk]:
        pending: list[tuple[_CsvBlock, int, int]] = []
        have = 0
        for block in self._blocks():
            if block is None:
                return
            table = block.typed if block.typed is not None else block.text
            assert table is not None
            offset = 0
            while offset < table.num_rows:
                take = min(table.num_rows - offset, self.chunksize - have)
                pending.append((block, offset, take))
                have += take
                offset += take
                if have == self.chunksize:
                    yield self._submit(pending)
                    pending, have = [], 0
        if pending:
            yield self._submit(pending)
        self.complete = True
